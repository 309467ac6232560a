"""A DeviceTaintRule's selector as the API defines it (resource.k8s.io DeviceTaintRuleSpec: "The
empty selector matches all devices. Without a selector, no devices are matched."). A rule with no
`deviceSelector` taints nothing for kube-scheduler, nor for topogang: before, topogang took it as
tainting every device of every node, all its DRA GPUs kept out of placements."""

from __future__ import annotations

from extender.dra.devices import DeviceMap, parse_taint_rule, tainted_gpus
from tests.dra.test_devices import gpu_slice, mapped


def test_a_rule_without_a_selector_taints_no_device() -> None:
    dm = mapped(gpu_slice())
    assert isinstance(dm, DeviceMap)
    rule = parse_taint_rule(
        {
            "metadata": {"name": "being-written"},
            "spec": {"taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}},
        }
    )
    got = tainted_gpus(dm, [rule] if rule is not None else [])
    assert got == {}, f"a rule with no deviceSelector taints GPUs {sorted(got)}"
    # the empty selector still matches every device
    every = parse_taint_rule(
        {
            "metadata": {"name": "all"},
            "spec": {"deviceSelector": {}, "taint": {"key": "k", "effect": "NoSchedule"}},
        }
    )
    assert every is not None and sorted(tainted_gpus(dm, [every])) == list(range(8))
