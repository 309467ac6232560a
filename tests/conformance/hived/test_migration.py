"""Switching from HiveD without draining: pods HiveD bound are adopted with exactly their GPUs.

The cluster runs HiveD's design config. Its pods carry what HiveD wrote at bind time (HiveD's
`internal.NewBindingPod`: `hivedscheduler.microsoft.com/pod-bind-info`, the `PodBindInfo` YAML as
yaml.v2 writes it, and `…/pod-leaf-cell-isolation`, the indices joined by commas), plus the
scheduling spec their owner wrote. topogang then starts in Kubernetes mode against an in-memory API
server holding those pods and recovers them before it reports ready, through the same path a restart
of topogang takes (`extender.kube.recovery`).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from config.load import load_config
from extender.kube.client import pod_path
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube
from tests.conformance.hived.driver import CONFIG
from tests.extender.helpers import Clock, ready_node, run
from tests.extender.test_kube_durable import Running, until
from topology.invariants import violations

NS = "default"
SPEC = "hivedscheduler.microsoft.com/pod-scheduling-spec"
ENABLE = "hivedscheduler.microsoft.com/pod-scheduling-enable"
BIND_INFO = "hivedscheduler.microsoft.com/pod-bind-info"
ISOLATION = "hivedscheduler.microsoft.com/pod-leaf-cell-isolation"
ALL16 = list(range(16))

# What HiveD itself writes for pod8 and pod9 of its own test table (1.0.0.2 also carries CT1 GPUs
# 8-9), as yaml.v2 emits it: block style, keys in PodBindInfo's field order; the group's part is the
# same for both members.
POD8_HEAD = """node: 1.0.0.0
leafCellIsolation:
- 1
- 3
- 4
- 7
- 0
- 2
- 6
cellChain: 3-DGX1-P100-NODE
"""
POD9_HEAD = """node: 1.0.0.2
leafCellIsolation:
- 0
- 1
- 2
- 3
- 4
cellChain: 3-DGX1-P100-NODE
"""
GROUP9_BIND_INFO = """affinityGroupBindInfo:
- podPlacements:
  - physicalNode: 1.0.0.0
    physicalLeafCellIndices:
    - 1
    - 3
    - 4
    - 7
    - 0
    - 2
    - 6
    preassignedCellTypes:
    - DGX1-P100-NODE
    - DGX1-P100-NODE
    - DGX1-P100-NODE
    - DGX1-P100-NODE
    - DGX1-P100-NODE
    - DGX1-P100-NODE
    - DGX1-P100-NODE
- podPlacements:
  - physicalNode: 1.0.0.2
    physicalLeafCellIndices:
    - 0
    - 1
    - 2
    - 3
    - 4
    preassignedCellTypes:
    - DGX1-P100-NODE
    - DGX1-P100-NODE
    - DGX1-P100-NODE
    - DGX1-P100-NODE
    - DGX1-P100-NODE
"""


def hived_spec(
    vc: str, priority: int, leaves: int, group: str, members: list[tuple[int, int]], **kw: Any
) -> str:
    doc = {
        "virtualCluster": vc,
        "priority": priority,
        "lazyPreemptionEnable": kw.get("lazy", False),
        "pinnedCellId": kw.get("pinned", ""),
        "leafCellType": kw.get("leaf_type", ""),
        "leafCellNumber": leaves,
        "affinityGroup": {
            "name": group,
            "members": [{"podNumber": p, "leafCellNumber": n} for p, n in members],
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


def bind_info(node: str, gpus: list[int], chain: str, placements: list[tuple[str, list[int], str]]) -> str:
    """PodBindInfo as HiveD writes it: one affinityGroupBindInfo entry per distinct leaf count."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for n, g, cell_type in placements:
        groups.setdefault(len(g), []).append(
            {
                "physicalNode": n,
                "physicalLeafCellIndices": list(g),
                "preassignedCellTypes": [cell_type] * len(g),
            }
        )
    doc = {
        "node": node,
        "leafCellIsolation": list(gpus),  # fresh lists: yaml.v2 never writes anchors
        "cellChain": chain,
        "affinityGroupBindInfo": [{"podPlacements": p} for p in groups.values()],
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def hived_pod(name: str, spec_text: str, node: str | None = None, info: str | None = None) -> dict[str, Any]:
    ann = {SPEC: spec_text}
    if node is not None and info is not None:
        ann[BIND_INFO] = info
        ann[ISOLATION] = ",".join(str(g) for g in yaml.safe_load(info)["leafCellIsolation"])
    pod: dict[str, Any] = {
        "metadata": {"uid": f"uid-{name}", "name": name, "namespace": NS, "annotations": ann},
        "spec": {
            "schedulerName": "hivedscheduler",
            "containers": [{"name": "main", "resources": {"limits": {ENABLE: "1"}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


GPUS = {"1.0.0.2": 10, "0.0.0.0": 2, "0.0.0.1": 2, "1.0.0.0": 8, "1.0.0.1": 8}
GPUS |= dict.fromkeys(["0.0.1.0", "0.0.5.0", "0.0.2.0", "0.0.2.1", "0.0.2.2", "0.1.0.0", "0.1.0.1"], 16)
GPUS |= {f"0.0.{r}.{i}": 16 for r in (3, 4) for i in range(4)}
NODES = sorted(GPUS)


def hived_cluster(kube: FakeKube) -> None:
    """Every node of HiveD's design config, Ready, with all its GPUs allocatable (1.0.0.2 has ten:
    eight DGX1-P100 and two CT1)."""
    for n, gpus in GPUS.items():
        kube.server.put(f"/api/v1/nodes/{n}", ready_node(n, gpus, gpus))


def hived_bound_pods() -> list[dict[str, Any]]:
    group5 = [(n, ALL16, "2-DGX2-V100-NODE") for n in ("0.0.3.0", "0.0.3.1")]
    group12 = [(n, ALL16, "DGX2-V100-NODE") for n in ("0.0.3.2", "0.0.3.3")]
    pinned = hived_spec("VC1", 1, 16, "group5", [(2, 16)], pinned="VC1-YQW-DGX2", leaf_type="DGX2-V100")
    g9 = hived_spec("VC2", 1, 7, "group9", [(1, 7), (1, 5)])
    g9_5 = hived_spec("VC2", 1, 5, "group9", [(1, 7), (1, 5)])
    g12 = hived_spec("VC1", 1, 16, "group12", [(2, 16)], leaf_type="DGX2-V100")
    return [
        # a two-pod gang in VC1's pinned rack, both members running
        hived_pod("pod5", pinned, "0.0.3.0", bind_info("0.0.3.0", ALL16, "4-DGX2-V100-NODE", group5)),
        hived_pod("pod6", pinned, "0.0.3.1", bind_info("0.0.3.1", ALL16, "4-DGX2-V100-NODE", group5)),
        # HiveD's heterogeneous any-leaf-type gang, one member on the node that is in two chains
        hived_pod("pod8", g9, "1.0.0.0", POD8_HEAD + GROUP9_BIND_INFO),
        hived_pod("pod9", g9_5, "1.0.0.2", POD9_HEAD + GROUP9_BIND_INFO),
        # an opportunistic pod on the same node's CT1 GPU 9 (no VC cell: preassigned type "")
        hived_pod(
            "opp",
            hived_spec("VC2", -1, 1, "opp", [(1, 1)], leaf_type="CT1"),
            "1.0.0.2",
            bind_info("1.0.0.2", [9], "CT1-NODE", [("1.0.0.2", [9], "")]),
        ),
        # a gang HiveD lazily preempted: it runs downgraded (types ""), its spec still says 0
        hived_pod(
            "pod24",
            hived_spec("VC2", 0, 2, "group15", [(1, 2)], leaf_type="CT1", lazy=True),
            "0.0.0.1",
            bind_info("0.0.0.1", [0, 1], "CT1-NODE", [("0.0.0.1", [0, 1], "")]),
        ),
        # a gang with one member bound and one still pending: its slot must stay reserved
        hived_pod("pod18", g12, "0.0.3.2", bind_info("0.0.3.2", ALL16, "4-DGX2-V100-NODE", group12)),
        hived_pod("pod19", g12),
    ]


EXPECTED: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {
    "group5": {"uid-pod5": ("0.0.3.0", tuple(ALL16)), "uid-pod6": ("0.0.3.1", tuple(ALL16))},
    "group9": {"uid-pod8": ("1.0.0.0", (0, 1, 2, 3, 4, 6, 7)), "uid-pod9": ("1.0.0.2", (0, 1, 2, 3, 4))},
    "opp": {"uid-opp": ("1.0.0.2", (9,))},
    "group15": {"uid-pod24": ("0.0.0.1", (0, 1))},
    "group12": {"uid-pod18": ("0.0.3.2", tuple(ALL16))},
}


# the switch-over as documented: the signing key in place, and the admin's opt-in for this first
# start (HiveD signs nothing); and as before, with no key at all
OWN_NS = "topogang-system"
SWITCH_OVER: dict[str, Any] = {"signing_key": b"s" * 32, "adopt_unsigned_bind_info": True}


@pytest.mark.parametrize("settings", [SWITCH_OVER, {}], ids=["opt-in", "no-key"])
def test_pods_hived_bound_are_adopted_with_exactly_their_gpus(settings: dict[str, Any]) -> None:
    async def go() -> None:
        kube, clock = FakeKube(), Clock()
        hived_cluster(kube)
        for p in hived_bound_pods():
            kube.server.put(pod_path(NS, p["metadata"]["name"]), p)
        service = kube_service(
            load_config(CONFIG), kube, clock=clock, namespace="topogang-system", **settings
        )
        r = Running(service)
        await until("ready", lambda: r.s.ready)
        core = r.s.core
        for gang, pods in EXPECTED.items():
            g = core.gang(f"{NS}/{gang}")  # HiveD's global names, read in the pods' namespace
            assert g is not None, gang
            held = {
                s.pod_uid: (core.slot_place(s)[0], tuple(sorted(core.slot_place(s)[1])))
                for s in g.slots
                if s.pod_uid is not None
            }
            assert held == pods, gang
        assert violations(core) == []
        # guaranteed gangs keep their VC cells; the lazily preempted one stays opportunistic
        assert core.gang(f"{NS}/group9").priority == 1  # type: ignore[union-attr]
        assert core.gang(f"{NS}/group5").priority == 1  # type: ignore[union-attr]
        assert core.gang(f"{NS}/group15").priority == -1  # type: ignore[union-attr]
        # the node in two chains: 5 DGX1-P100 and 1 CT1 GPU in use, 4 free of 10
        assert core.node_fill("1.0.0.2") == (4, 10)
        # the pending member finds its slot kept, on the node HiveD had chosen for it
        pod19 = kube.server.at(pod_path(NS, "pod19"))
        got = await r.verb("filter", pod19, NodeNames=NODES)
        assert got["NodeNames"] == ["0.0.3.3"], got
        # and nothing new lands on an adopted GPU: VC2's P100 quota is used, a CT1 node is free
        newcomer = hived_pod("new", hived_spec("VC2", 1, 2, "new", [(1, 2)], leaf_type="CT1"))
        kube.server.put(pod_path(NS, "new"), newcomer)
        got = await r.verb("filter", newcomer, NodeNames=NODES)
        (node,) = got["NodeNames"]
        g = core.gang(f"{NS}/new")
        assert g is not None and node in ("0.0.0.0", "0.0.0.1")
        taken = {(n, gpu) for pods in EXPECTED.values() for n, gpus in pods.values() for gpu in gpus}
        assert not {(core.slot_place(s)[0], gpu) for s in g.slots for gpu in core.slot_place(s)[1]} & taken
        assert violations(core) == []
        await r.stop()

    run(go())


def test_a_hived_group_name_is_adopted_in_each_pods_own_namespace() -> None:
    """HiveD's names are global; topogang's are per namespace. Pods HiveD bound in one group
    `shared` but in two namespaces come back as one gang per namespace, each pod with exactly its
    GPUs, and neither gang keeps a slot on the GPUs the other namespace's pod holds."""

    async def go() -> None:
        kube, clock = FakeKube(), Clock()
        hived_cluster(kube)
        both = [("0.0.3.0", ALL16, "DGX2-V100-NODE"), ("0.0.3.1", ALL16, "DGX2-V100-NODE")]
        shared = hived_spec("VC1", 1, 16, "shared", [(2, 16)], leaf_type="DGX2-V100")
        pods = []
        for ns, node in (("team-a", "0.0.3.0"), ("team-b", "0.0.3.1")):
            p = hived_pod(f"{ns}-0", shared, node, bind_info(node, ALL16, "4-DGX2-V100-NODE", both))
            p["metadata"]["namespace"] = ns
            kube.server.put(pod_path(ns, p["metadata"]["name"]), p)
            pods.append(p)
        r = Running(kube_service(load_config(CONFIG), kube, clock=clock, namespace="topogang-system"))
        await until("ready", lambda: r.s.ready)
        core = r.s.core
        assert core.gang("shared") is None
        for p in pods:
            ns, node = p["metadata"]["namespace"], p["spec"]["nodeName"]
            g = core.gang(f"{ns}/shared")
            assert g is not None, ns
            held = [(core.slot_place(s)[0], s.pod_uid) for s in g.slots if s.pod_uid is not None]
            assert held == [(node, p["metadata"]["uid"])], (ns, held)
        assert violations(core) == []
        await r.stop()

    run(go())


def test_without_the_opt_in_hived_bound_pods_are_held_not_adopted() -> None:
    """With the signing key and no opt-in, HiveD's bind info is no topogang decision: every bound
    pod's GPUs are held, with no quota or priority, and no gang is rebuilt from it."""

    async def go() -> None:
        kube, clock = FakeKube(), Clock()
        hived_cluster(kube)
        for p in hived_bound_pods():
            kube.server.put(pod_path(NS, p["metadata"]["name"]), p)
        settings = {**SWITCH_OVER, "adopt_unsigned_bind_info": False}
        r = Running(
            kube_service(load_config(CONFIG), kube, clock=clock, namespace="topogang-system", **settings)
        )
        await until("ready", lambda: r.s.ready)
        core = r.s.core
        for gang, pods in EXPECTED.items():
            assert core.gang(gang) is None, gang
            for uid, (node, gpus) in pods.items():
                g = core.gang(f"unverified:{NS}/{uid.removeprefix('uid-')}")
                assert g is not None and g.priority == -1 and g.evicting, uid
                assert {(core.slot_place(s)[0], tuple(sorted(core.slot_place(s)[1]))) for s in g.slots} == {
                    (node, gpus)
                }
        assert core.node_fill("1.0.0.2") == (4, 10)  # the same GPUs in use as when adopted
        assert violations(core) == []
        await r.stop()

    run(go())
