"""A gang let go while its pods run keeps them in a gang of its own, `<gang>/evicted/<n>`
(`gangs.keep_until_gone`), and that name must be one no gang of the core has. A reload
(`reconfigure`) keeps every gang's name but numbers the gangs afresh, so `<gang>/evicted/<its id>`
can be the name of a gang an earlier eviction left running: the registry then has two gangs of one
name, the older one reachable by id only. Found by `test_snapshot_since.py::TestCopies` (seed
248830151384224640658252028040415060147): `adopt` of the older gang's request claimed no slot, and
deleting every gang left its GPU held."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster
from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement
from topology.invariants import snapshot
from topology.reconfigure import reconfigure


def _names_unique(core: Core) -> None:
    res = core.reservations
    assert {g.id for g in res.by_name.values()} == set(res.by_id), "a gang reachable by id only"


def test_an_eviction_after_a_reload_does_not_take_a_running_gangs_name() -> None:
    spec = rack_cluster()
    core = Core(spec)
    assert isinstance(core.reserve(gang("h", "a", (1, 1)), 0.0), GangPlacement)  # id 1
    g = gang("g", "a", (1, 1))
    assert isinstance(core.reserve(g, 0.0), GangPlacement)  # id 2
    core.claim("g", "p1", 1, 0.0, node=None)
    core.evict_gang("g", 1.0)  # p1 runs on in `g/evicted/2` until it is gone
    core.delete_gang("h")
    assert isinstance(core.reserve(g, 2.0), GangPlacement)  # placed again
    core.claim("g", "p2", 1, 2.0, node=None)
    core, _ = reconfigure(core, spec, 3.0)  # renumbered: `g/evicted/2` is id 1, `g` id 2
    assert core.gang("g").id == 2  # type: ignore[union-attr]
    core.evict_gang("g", 4.0)  # p2 runs on in a gang of its own, not named `g/evicted/2` again
    _names_unique(core)
    assert sorted(core.reservations.pod_gang) == ["p1", "p2"]
    core, _ = reconfigure(core, spec, 5.0)  # a second reload keeps both running pods
    _names_unique(core)
    assert sorted(core.reservations.pod_gang) == ["p1", "p2"]
    for x in core.gangs():
        core.delete_gang(x.name)
    assert snapshot(core) == snapshot(Core(spec))


def test_the_state_machine_example() -> None:
    """The hypothesis example, shrunk: a gang whose name an eviction would give its pods' gang
    (the machine filters such a gang's request again), then an eviction of the gang it is named after."""
    spec = rack_cluster()
    core = Core(spec)
    g1 = gang("g1", "a", (1, 1), priority=-1, gang_release=True, ttl_seconds=5.0)
    assert isinstance(core.reserve(g1, 0.0), GangPlacement)  # id 1
    core.claim("g1", "pod-1", 1, 0.0, node=None)
    other = gang("g1/evicted/1", "a", (1, 1), priority=-1, gang_release=True, ttl_seconds=5.0)
    assert isinstance(core.reserve(other, 0.0), GangPlacement)  # id 2
    core.evict_gang("g1", 0.0)  # pod-1 runs on in a gang of its own
    _names_unique(core)
    held = core.gang("g1/evicted/1")
    assert held is not None and not held.evicting, "the eviction took another gang's name"
    s = held.slots[0]
    topo = core.topo
    pod = AdoptedPod(
        "pod-2", topo.node_names[s.node], tuple(topo.gpu_index[x] for x in s.leaves), None, s.key, ("",)
    )
    core.adopt(held.request, [pod], 0.0)  # a pod found running on its open slot
    assert s.pod_uid == "pod-2"
    for x in core.gangs():
        core.delete_gang(x.name)
    assert snapshot(core) == snapshot(Core(spec)), "deleting everything must restore the start"
