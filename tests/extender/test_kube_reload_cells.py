"""Hot reloads that change the cells, in Kubernetes mode, against the in-memory API server: what
runs on hardware a reload adds or takes out (found by the soak's `--cells` mode).

- A node the reload adds may already run pods: topogang's own, left running on a rack the admin
  took out for repair and now brings back, and other schedulers' pods holding GPUs. The new core
  gets the node fenced until the sync has read what runs there (`extender.kube.node_changes`).
- A gang placed again after a reload took out one member's node has pods of two placements under
  one name; a restart takes the placement that lies on the config's nodes as the current one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from config.against import CONFIRM_FILE, config_digest
from config.load import load_config, load_config_text
from extender.gangs.disruption import Disruption, preempted_by
from extender.http.reload import ConfigWatcher
from extender.http.verbs import Scheduler
from extender.kube.leader import LeaseSettings
from extender.kube.node_changes import NodeChanges
from extender.kube.off_config import OffConfig
from extender.kube.recovery import recover
from extender.kube.service import kube_service
from extender.kube.sync import ClusterSync
from extender.standalone import EXAMPLE_CONFIG, MemoryBinder
from tests.extender.helpers import Clock, example, place, pod, run, scheduler, spec
from tests.extender.test_kube_durable import NS, Running, cluster, start, submit, until
from tests.extender.test_kube_edge import apiserver, bound_pods, node
from tests.extender.test_kube_outside import plain
from tests.soak.layouts import layout_text, without_rack
from topology.core import Core
from topology.invariants import violations

REPAIRED = "a100-r3-n2"  # a node of rack 3, which the layout "rack 3 out for repair" does not have
WITHOUT_RACK3 = 4  # `tests.soak.layouts.LAYOUTS`


def owner(service: Any, kind: type) -> Any:
    """The object of `kind` whose method runs among the service's background tasks."""
    return next(o for fn in service.background if isinstance(o := getattr(fn, "__self__", None), kind))


def only_healthy(s: Any, keep: set[str]) -> None:
    for n in s.core.node_names():
        s.core.set_node_health(n, n in keep)


def test_a_node_a_reload_adds_is_used_only_once_what_runs_there_is_held(tmp_path: Path) -> None:
    async def go() -> None:
        binder = MemoryBinder()
        s = scheduler(binder)
        only_healthy(s, {REPAIRED})
        ours = pod("u1", "train-0", "nlp", spec("nlp", 4))
        await place(s, ours)
        api = bound_pods(s, binder, [ours])
        assert api[0]["spec"]["nodeName"] == REPAIRED
        theirs = plain("other", REPAIRED, 2)  # another scheduler's pod, 2 GPUs
        path = tmp_path / "cluster.yaml"
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path.write_text(layout_text(base, WITHOUT_RACK3), encoding="utf-8")
        kube = apiserver([*api, theirs], [node(n) for n in s.core.node_names()])
        service = kube_service(load_config(path), kube)
        k, sync, watcher = service.scheduler, owner(service, ClusterSync), owner(service, ConfigWatcher)
        await sync.start()
        assert not k.core.has_node(REPAIRED) and not k.core.holds_slot("u1")

        path.write_text(base, encoding="utf-8")  # rack 3 is back
        assert await watcher.check() == "applied"
        assert k.core.node_health(REPAIRED) == tuple(range(8)), "usable before what runs there is read"
        added = watcher.on_applied.__self__
        assert isinstance(added, NodeChanges)
        await asyncio.gather(*added.tasks)
        assert k.core.holds_slot("u1"), "topogang's pod on the added node is not held"
        assert k.core.node_fill(REPAIRED) == (8 - 4 - 2, 8), "a running pod's GPUs are free"
        assert sync.fenced == set() and violations(k.core) == []

    run(go())


def test_a_node_list_waiting_for_the_lock_is_applied_to_the_core_a_reload_put_in_place() -> None:
    async def go() -> None:
        names = Core(example().spec).node_names()
        kube = apiserver([], [node(n) for n in names])
        service = kube_service(example(), kube)
        k, sync = service.scheduler, owner(service, ClusterSync)
        await sync.start()
        async with k.lock:  # a reload holds the lock while the node watch lists again
            relist = asyncio.create_task(sync.relist_nodes([node(n) for n in names if n != REPAIRED]))
            await asyncio.sleep(0)
            k.core = Core(example().spec)  # ... and puts a new core in place, every node healthy
        await relist
        assert k.core.node_health(REPAIRED) == tuple(range(8)), "a node gone from the API is usable"

    run(go())


def test_a_restart_takes_the_placement_on_the_configs_nodes_as_the_current_one(tmp_path: Path) -> None:
    """Member 0 of a two-pod gang was bound on rack 3; the admin took rack 3 out (confirmed) and the
    gang was placed again elsewhere, where member 1 is bound. After a restart, the gang is the one
    placed again, with member 0's slot open (its pod on rack 3 never counts for it), not a remnant
    kept until gone that no reservation TTL ever ends."""

    async def go() -> None:
        text = spec("nlp", 4, 2, "nlp/pair")
        first, second = pod("a", "pair-0", "nlp", text), pod("b", "pair-1", "nlp", text)
        binder = MemoryBinder()
        before = scheduler(binder)
        only_healthy(before, {"a100-r3-n1", "a100-r3-n2"})
        await place(before, first)
        path = tmp_path / "cluster.yaml"
        path.write_text(layout_text(EXAMPLE_CONFIG.read_text(encoding="utf-8"), WITHOUT_RACK3))
        after = scheduler(binder)
        after.core = Core(load_config(path).spec)
        await place(after, second)
        api = bound_pods(before, binder, [first]) + bound_pods(after, binder, [second])
        assert api[0]["spec"]["nodeName"].startswith("a100-r3-") and api[1]["spec"]["nodeName"]
        fresh = Core(load_config(path).spec)
        report = recover(fresh, api, now=0.0, namespace_vcs={"nlp": "nlp"})
        gang = fresh.gang("nlp/pair")
        assert gang is not None, report.lines()
        assert [sl.pod_uid for sl in gang.slots].count("b") == 1 and gang.deadline is not None
        assert fresh.reservations.pod_gang.get("a") is None
        assert violations(fresh) == []

    run(go())


async def pair_bound_on_rack3(binder: MemoryBinder) -> tuple[Any, str, list[dict[str, Any]]]:
    """A two-pod gang of nlp, both members bound on rack 3: the scheduler, the gang's spec text and
    the API's pods after the binds."""
    s = scheduler(binder)
    only_healthy(s, {REPAIRED})
    text = spec("nlp", 4, 2, "nlp/pair")
    members = [pod("a", "pair-0", "nlp", text), pod("b", "pair-1", "nlp", text)]
    for p in members:
        await place(s, p)
    return s, text, bound_pods(s, binder, members)


async def one_member_bound_on_rack3(binder: MemoryBinder) -> list[dict[str, Any]]:
    """A two-pod gang of nlp whose one member is bound on rack 3 (the other not yet created), and
    two one-node nlp gangs filling the rest of VC nlp's three node cells: the API's pods after the
    binds."""
    s = scheduler(binder)
    only_healthy(s, {REPAIRED})
    member = pod("a", "pair-0", "nlp", spec("nlp", 4, 2, "nlp/pair"))
    await place(s, member)
    only_healthy(s, {n for n in s.core.node_names() if not n.startswith("a100-r3-")})
    full = [pod(f"n{i}", f"whole-{i}", "nlp", spec("nlp", 8)) for i in range(2)]
    for p in full:
        await place(s, p)
    return bound_pods(s, binder, [member, *full])


def refusing_start(tmp_path: Path, layout: int, api: list[dict[str, Any]]) -> tuple[Any, Any, list[int]]:
    path = tmp_path / "cluster.yaml"
    path.write_text(layout_text(EXAMPLE_CONFIG.read_text(encoding="utf-8"), layout), encoding="utf-8")
    names = Core(example().spec).node_names()
    kube = apiserver(api, [node(n) for n in names])
    exits: list[int] = []
    service = kube_service(load_config(path), kube, on_config_refused=lambda: exits.append(1))
    return service, kube, exits


def test_a_start_refuses_a_config_that_costs_running_gangs_until_it_is_confirmed(tmp_path: Path) -> None:
    """The config on disk drops rack 3 (a member of a gang not whole runs there) and shrinks nlp to
    one node cell (one of its two one-node gangs no longer fits): a hot reload refuses that unless
    confirmed, and so does a start. Confirmed, the start takes it up as the reload would: the gang
    not whole is let go (its member evicted) and the others run on as opportunistic."""

    async def go() -> None:
        api = await one_member_bound_on_rack3(MemoryBinder())
        service, kube, exits = refusing_start(tmp_path, WITHOUT_RACK3, api)
        k, sync = service.scheduler, owner(service, ClusterSync)
        await sync.start()
        digest = config_digest(load_config(tmp_path / "cluster.yaml"))
        assert not k.ready and "refused at the start" in k.not_ready_reason and exits == [1]
        assert digest in k.not_ready_reason and "nlp/pair" not in k.not_ready_reason  # /readyz is open
        await until("the Event", lambda: bool(kube.server.events))
        (event,) = [e for e in kube.server.events if e["reason"] == "ConfigRejected"]
        assert "nlp/pair" in event["message"] and "pair-0" in event["message"] and digest in event["message"]
        assert not [c for c in kube.calls if c[0] == "DELETE"]  # refused: nothing evicted

        (tmp_path / CONFIRM_FILE).write_text(digest + "\n")
        service, kube, exits = refusing_start(tmp_path, WITHOUT_RACK3, api)
        k, sync = service.scheduler, owner(service, ClusterSync)
        await sync.start()
        assert sync.synced and "refused" not in k.not_ready_reason and exits == [], k.not_ready_reason
        deleted = [path for method, path, _ in kube.calls if method == "DELETE"]
        assert deleted == ["/api/v1/namespaces/nlp/pods/pair-0"]
        whole = sorted(g.priority for g in k.core.gangs() if g.name.startswith("nlp/pod:whole-"))
        assert whole == [-1, 0], whole
        assert violations(k.core) == []

    run(go())


def test_a_start_under_the_config_its_gangs_run_under_refuses_nothing(tmp_path: Path) -> None:
    async def go() -> None:
        api = await one_member_bound_on_rack3(MemoryBinder())
        service, kube, exits = refusing_start(tmp_path, 0, api)
        k, sync = service.scheduler, owner(service, ClusterSync)
        await sync.start()
        assert sync.synced and "refused" not in k.not_ready_reason and exits == []
        assert k.core.holds_slot("a")
        assert not [c for c in kube.calls if c[0] == "DELETE"] and violations(k.core) == []

    run(go())


async def duo_on_rack3() -> tuple[Scheduler, list[dict[str, Any]], list[dict[str, Any]]]:
    """A whole two-pod gang nlp/duo bound with one pod on rack 3 (`REPAIRED`): the scheduler, the
    pods, and the API server's copies of them, bound."""
    binder = MemoryBinder()
    s = scheduler(binder)
    only_healthy(s, {"a100-r1-n4", REPAIRED})
    text = spec("nlp", 8, 2, "nlp/duo")
    duo = [pod("d0", "duo-0", "nlp", text), pod("d1", "duo-1", "nlp", text)]
    for p in duo:
        await place(s, p)
    return s, duo, bound_pods(s, binder, duo)


def test_a_whole_gang_a_confirmed_start_cut_takes_its_pod_outside_along_when_let_go(tmp_path: Path) -> None:
    """A whole two-pod gang with one pod on rack 3: confirmed, the start without rack 3 keeps the
    gang running on its other pod, and the pod on rack 3 outside the books. When the held member
    goes, the gang is not whole, and the pod outside is evicted: no TTL would ever reach it."""

    async def go() -> None:
        _, _, api = await duo_on_rack3()
        assert sorted(p["spec"]["nodeName"] for p in api) == ["a100-r1-n4", REPAIRED]
        service, kube, _ = refusing_start(tmp_path, WITHOUT_RACK3, api)
        digest = config_digest(load_config(tmp_path / "cluster.yaml"))
        (tmp_path / CONFIRM_FILE).write_text(digest, encoding="utf-8")
        k, sync = service.scheduler, owner(service, ClusterSync)
        await sync.start()
        outside = next(p for p in api if p["spec"]["nodeName"] == REPAIRED)
        held = next(p for p in api if p is not outside)
        gang = k.core.gang("nlp/duo")
        assert gang is not None and [sl.pod_uid for sl in gang.slots] == [held["metadata"]["uid"]]
        assert sync.off_config.by_gang == {"nlp/duo": {outside["metadata"]["uid"]}}
        assert not [c for c in kube.calls if c[0] == "DELETE"]  # whole: it runs on
        await sync.on_pod("DELETED", held)
        deleted = [path for method, path, _ in kube.calls if method == "DELETE"]
        assert deleted == [f"/api/v1/namespaces/nlp/pods/{outside['metadata']['name']}"]
        assert k.core.gang("nlp/duo") is None

    run(go())


def test_evictions_are_the_leaders_a_standby_sees_the_same_and_keeps_its_view_only() -> None:
    """A reload's evictions and those of a gang's departed member are decided by every replica, which
    all see the same reloads and pod events; only the leader acts on them."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        lease = LeaseSettings(NS, "lead", lease_seconds=0.3, renew_deadline=0.2, retry_seconds=0.05)
        a = await start(kube, clock, lease=lease, identity="a")
        b = Running(kube_service(example(), kube, clock=clock, namespace=NS, lease=lease, identity="b"))
        await until("b synced, as standby", lambda: b.s.not_ready_reason.endswith("held by a"))
        submit(kube, "x", "x-0", "vision", spec("vision", 8))
        await until("both see it", lambda: "x" in owner(a.service, ClusterSync).live)
        await until("both see it", lambda: "x" in owner(b.service, ClusterSync).live)
        assert b.s.evictor is not None and a.s.evictor is not None
        await b.s.evictor(["x"], preempted_by("vision/a-standby-s-decision"))
        assert kube.server.objects.get(("v1", "pods", "vision", "x-0")) is not None
        await a.s.evictor(["x"], preempted_by("vision/the-leader-s-decision"))
        assert kube.server.objects.get(("v1", "pods", "vision", "x-0")) is None
        await b.stop()
        await a.stop()

    run(go())


def test_a_reservation_that_expires_after_a_reload_renumbered_the_nodes_is_told_on_the_new_ones(
    tmp_path: Path,
) -> None:
    """Rack 1 taken out renumbers every node after it. A gang waiting on rack 3 through the reload
    expires later: the gang ledger's tombstone is written from the new core's gang, not from the
    old core's (whose node numbers run past the new node list: the expiry sweep raised)."""

    async def go() -> None:
        clock = Clock()
        s = scheduler(MemoryBinder(), clock, ttl_seconds=60.0)
        path = tmp_path / "cluster.yaml"
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path.write_text(base, encoding="utf-8")
        watcher = ConfigWatcher(s, path, clock=clock)
        only_healthy(s, {"a100-r3-n4"})
        await place(s, pod("a", "pair-0", "nlp", spec("nlp", 4, 2, "nlp/pair")))
        assert s.gang_ledger.records["nlp/pair"].last_gang is s.core.gang("nlp/pair")
        path.write_text(without_rack(base, 1), encoding="utf-8")
        assert await watcher.check() == "applied"
        assert s.gang_ledger.records["nlp/pair"].last_gang is s.core.gang("nlp/pair")
        clock.t += 61
        (released,) = await s.expire()
        assert released.gang == "nlp/pair"
        tomb = s.gang_ledger.records["nlp/pair"].tombstone
        assert tomb is not None and tomb["placement"]["nodes"] == ["a100-r3-n4"]

    run(go())


def test_pods_of_an_earlier_placement_recovered_one_by_one_are_each_held_apart_and_evicted() -> None:
    """Two members bound on rack 3 whose gang the core has placed again elsewhere meanwhile (rack 3
    was out, and is back), recovered one by one as the watch or a reload's read brings them: each
    is held apart until gone, under its own name (the second used to be adopted into the first's
    name, match no slot, and run on GPUs the core thought free), and named for eviction."""

    async def go() -> None:
        _, text, api = await pair_bound_on_rack3(MemoryBinder())
        after = scheduler(MemoryBinder())
        only_healthy(after, {"a100-r1-n1"})
        await place(after, pod("c", "pair-0", "nlp", text))  # the gang placed again, elsewhere
        evicted: list[str] = []
        for p in api:
            report = recover(after.core, [p], now=0.0, namespace_vcs={"nlp": "nlp"})
            evicted += report.evict
        assert evicted == ["a", "b"]
        held = {u: after.core.gang_of_pod(u) for u in ("a", "b")}
        assert all(g is not None and g.evicting for g in held.values()), held
        assert len({g.name for g in held.values() if g is not None}) == 2
        assert violations(after.core) == []

    run(go())


class HeldBinder(MemoryBinder):
    """A binder whose Binding is written only once `go` is set: a Binding in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def bind(self, target: Any, node: str, annotations: Any) -> None:
        await self.go.wait()
        await super().bind(target, node, annotations)


def test_a_reload_waits_for_the_bindings_being_written(tmp_path: Path) -> None:
    """A bind claims its slot under the lock and writes the Binding outside it. A reload swapping the
    core in between rebuilt it without that pod, which the API then showed bound: with its node
    taken out and put back before the watch brought the pod, another pod was given its GPUs (the
    --cells soak, seed 102 at 10,000 operations: two pods on GPUs 0 and 1 of a100-r4-n1)."""

    async def go() -> None:
        clock, binder = Clock(), HeldBinder()
        s = scheduler(binder, clock)
        path = tmp_path / "cluster.yaml"
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path.write_text(base, encoding="utf-8")
        watcher = ConfigWatcher(s, path, clock=clock)
        p = pod("a", "solo-0", "nlp", spec("nlp", 8))
        binding = asyncio.create_task(place(s, p))
        await until("the Binding in flight", lambda: bool(s.inflight))
        path.write_text(layout_text(base, 1), encoding="utf-8")  # nlp one node more: nothing lost
        old = s.core
        reload = asyncio.create_task(watcher.check())
        await asyncio.sleep(0.3)
        assert not reload.done() and s.core is old  # waits while the Binding is being written
        binder.go.set()
        await binding
        assert await reload == "applied" and s.core is not old and s.core.holds_slot("a")

    run(go())


def test_a_pod_outside_the_config_counts_only_for_a_gang_of_its_own_namespace() -> None:
    """The gang a pod outside the config is kept under is read from its bind info in the pod's own
    namespace: a copy of another team's bind info on a pod of an intruder's namespace is kept under
    no gang, so its going evicts nobody's pods, and another team's member going evicts only that
    team's pods outside."""

    async def go() -> None:
        s, _, api = await pair_bound_on_rack3(MemoryBinder())
        forged = {**api[0], "metadata": {**api[0]["metadata"], "namespace": "intruder", "uid": "x"}}
        evicted: list[str] = []

        async def evict(uids: Any, why: Disruption) -> None:
            evicted.extend(uids)

        core = Core(load_config_text(layout_text(EXAMPLE_CONFIG.read_text(), WITHOUT_RACK3)).spec)
        s.core = core  # the config without rack 3: every pod above runs outside it
        sync = SimpleNamespace(s=s, pods={}, signer=None, evictor=evict)  # what `OffConfig` reads
        off = OffConfig(sync)
        for p in (*api, forged):
            off.saw(p)
        assert off.by_gang == {"nlp/pair": {"a", "b"}} and "x" not in off.gang_of
        await off.going("x", succeeded=False)  # the forged pod goes: nobody's pods with it
        assert evicted == []
        await off.going("a", succeeded=False)
        assert evicted == ["b"]

    run(go())


HALF_SWITCHES = (
    "    A100-SWITCH:                  # 2 GPUs behind one PCIe switch\n      childCellType: A100\n"
    "      childCellNumber: 2"
)


def test_a_start_under_a_config_that_took_gpus_out_from_under_a_pod_asks_as_a_reload_does() -> None:
    """The edit halves every node (one GPU a switch) under a whole 8-GPU gang: a reload refuses it
    until confirmed, so a start under it must too (its judgement saw only pods on missing nodes),
    and the pod keeps the GPUs that remain instead of being taken for an earlier placement."""

    async def go() -> None:
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        assert HALF_SWITCHES in base
        halved = load_config_text(base.replace(HALF_SWITCHES, HALF_SWITCHES[:-1] + "1"), "c.yaml").spec
        binder = MemoryBinder()
        s = scheduler(binder)
        p = pod("u1", "trainer", "nlp", spec("nlp", 8, priority=10))
        assert (await place(s, p))[1]
        core = Core(halved)
        report = recover(core, bound_pods(s, binder, [p]), now=0.0, namespace_vcs={"nlp": "nlp"})
        assert report.costs() == [
            "gang nlp/pod:trainer: pods run on GPUs their node lacks in the config: trainer"
        ]
        assert core.holds_slot("u1") and not report.evict
        assert violations(core) == []

    run(go())
