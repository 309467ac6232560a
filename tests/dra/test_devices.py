"""The device mapping: which ResourceSlice device is which GPU of the cell tree, and what is refused."""

from __future__ import annotations

from typing import Any

from config.load import load_config
from extender.dra.devices import (
    DeviceMap,
    DraSettings,
    Mismatch,
    map_node,
    node_devices,
    parse_slice,
    parse_taint_rule,
    tainted_gpus,
)
from topology.model import Topology
from topology.node_layout import node_halves

SETTINGS = DraSettings()
NODE = "a100-r1-n1"


def example_halves() -> dict[int, str]:
    loaded = load_config("config/examples/example-cluster.yaml")
    return node_halves(Topology(loaded.spec), NODE)


def gpu_slice(
    node: str = NODE,
    n: int = 8,
    *,
    roots: list[str] | None = None,
    bus: list[str] | None = None,
    generation: int = 1,
    count: int = 1,
    name: str = "s",
    taints: dict[int, str] | None = None,
) -> dict[str, Any]:
    """A ResourceSlice as NVIDIA's driver publishes it: devices gpu-<minor>, standard PCI attributes."""
    bus = bus or [f"0000:{0x18 + 0x10 * i:02x}:00.0" for i in range(n)]
    roots = roots or [f"pci0000:{i // 2:02x}" for i in range(n)]  # two GPUs per switch
    devices = []
    for i in range(n):
        d: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {
                "uuid": {"string": f"GPU-{i}"},
                "resource.kubernetes.io/pciBusID": {"string": bus[i]},
                "resource.kubernetes.io/pcieRoot": {"string": roots[i]},
            },
        }
        if taints and i in taints:
            d["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": taints[i]}]
        devices.append(d)
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
        },
    }


def mapped(*slices: dict[str, Any]) -> DeviceMap | Mismatch:
    parsed = [s for s in (parse_slice(x) for x in slices) if s is not None]
    return map_node(NODE, example_halves(), node_devices(parsed, "gpu.nvidia.com", NODE), SETTINGS)


def test_the_example_node_has_two_halves_of_four() -> None:
    halves = example_halves()
    assert sorted(halves) == list(range(8))
    assert len({halves[g] for g in range(4)}) == 1 and len({halves[g] for g in range(4, 8)}) == 1
    assert halves[0] != halves[4]


def test_devices_are_gpus_in_pci_bus_order() -> None:
    # published out of order, bus ids reversed: GPU 0 is the lowest bus id, whatever its name
    bus = [f"0000:{0xF0 - 0x10 * i:02x}:00.0" for i in range(8)]
    roots = [f"pci0000:{(7 - i) // 2:02x}" for i in range(8)]
    dm = mapped(gpu_slice(bus=bus, roots=roots))
    assert isinstance(dm, DeviceMap)
    assert [dm.by_gpu[g].name for g in range(8)] == [f"gpu-{7 - g}" for g in range(8)]
    assert dm.gpu_of(NODE, "gpu-7") == 0
    assert dm.device_of(3) is not None and dm.device_of(3).pool == NODE  # type: ignore[union-attr]


def test_the_order_attribute_is_the_admins_choice() -> None:
    slice_ = gpu_slice()
    for i, d in enumerate(slice_["spec"]["devices"]):
        d["attributes"]["minor"] = {"int": 7 - i}  # a driver-domain attribute, named without domain
    parsed = [parse_slice(slice_)]
    dm = map_node(
        NODE,
        example_halves(),
        node_devices([p for p in parsed if p], "gpu.nvidia.com", NODE),
        DraSettings(order_by="minor"),
    )
    assert isinstance(dm, DeviceMap)
    assert dm.by_gpu[0].name == "gpu-7"


def test_a_wrong_count_is_reported_not_guessed() -> None:
    got = mapped(gpu_slice(n=6))
    assert isinstance(got, Mismatch)
    assert got.node == NODE and "6 gpu.nvidia.com devices published, the config has 8 GPUs" in got.reason


def test_a_pcie_root_across_two_halves_is_reported() -> None:
    roots = [f"pci0000:{i // 2:02x}" for i in range(8)]
    roots[4] = roots[3]  # GPU 3 (first half) and GPU 4 (second half) behind one root
    got = mapped(gpu_slice(roots=roots))
    assert isinstance(got, Mismatch)
    assert "one PCIe root across two halves" in got.reason and "GPU 2" in got.reason and "GPU 4" in got.reason


def test_roots_within_halves_agree_even_one_root_per_half() -> None:
    roots = ["pci0000:00"] * 4 + ["pci0000:80"] * 4
    assert isinstance(mapped(gpu_slice(roots=roots)), DeviceMap)


def test_a_missing_or_repeated_order_attribute_is_reported() -> None:
    s = gpu_slice()
    del s["spec"]["devices"][2]["attributes"]["resource.kubernetes.io/pciBusID"]
    got = mapped(s)
    assert (
        isinstance(got, Mismatch) and "gpu-2 has no attribute resource.kubernetes.io/pciBusID" in got.reason
    )
    bus = ["0000:18:00.0"] * 8
    got = mapped(gpu_slice(bus=bus))
    assert isinstance(got, Mismatch) and "same resource.kubernetes.io/pciBusID" in got.reason


def test_a_root_on_some_devices_only_is_reported() -> None:
    s = gpu_slice()
    del s["spec"]["devices"][5]["attributes"]["resource.kubernetes.io/pcieRoot"]
    got = mapped(s)
    assert isinstance(got, Mismatch) and "gpu-5" in got.reason


def test_slices_split_in_a_pool_and_generations() -> None:
    whole = gpu_slice()
    first, second = gpu_slice(count=2, name="a"), gpu_slice(count=2, name="b")
    first["spec"]["devices"] = whole["spec"]["devices"][:4]
    second["spec"]["devices"] = whole["spec"]["devices"][4:]
    assert isinstance(mapped(first, second), DeviceMap)
    got = mapped(first)  # half a pool: wait for the rest, do not map four GPUs
    assert isinstance(got, Mismatch) and "1 of 2 slices" in got.reason
    old = gpu_slice(n=6, name="old", generation=1)
    assert isinstance(mapped(old, gpu_slice(name="new", generation=2)), DeviceMap)  # the newest counts


def test_no_slice_is_reported_and_other_drivers_and_nodes_are_ignored() -> None:
    other = gpu_slice()
    other["spec"]["driver"] = "gpu.example.com"
    got = mapped(other, gpu_slice(node="a100-r1-n2"))
    assert isinstance(got, Mismatch) and "no gpu.nvidia.com devices" in got.reason
    assert parse_slice({"spec": {"driver": "x", "pool": {"name": "p"}}}) is None  # no nodeName


def test_slice_taints_and_taint_rules_mark_gpus_bad() -> None:
    dm = mapped(gpu_slice(taints={1: "NoSchedule", 2: "None"}))
    assert isinstance(dm, DeviceMap)
    assert set(tainted_gpus(dm, [])) == {1}  # an informational taint takes nothing away
    rule = parse_taint_rule(
        {
            "metadata": {"name": "xid-79"},
            "spec": {
                "deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-6"},
                "taint": {"key": "k", "value": "v", "effect": "NoExecute"},
            },
        }
    )
    assert rule is not None
    bad = tainted_gpus(dm, [rule])
    assert set(bad) == {1, 6} and "DeviceTaintRule xid-79" in bad[6]
    cel = parse_taint_rule(
        {
            "metadata": {"name": "c"},
            "spec": {"deviceSelector": {"selectors": [{"cel": {}}]}, "taint": {"effect": "NoSchedule"}},
        }
    )
    assert cel is None  # not evaluated here: never widened to every device
