"""Tenants stay in their own lane: a pod's VC, pinned cell and priority held to its namespace's
entitlement (`extender.gangs.entitlement`), through the verbs on the example cluster with entitlement
keys added, before the core is asked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.load import LoadedConfig, load_config_text
from extender.gangs.bindinfo import BIND_INFO_ANNOTATIONS, encode_bind_info
from extender.gangs.disruption import Disruption
from extender.gangs.entitlement import EntitlementError, Entitlements, grant
from extender.http import podrequests, wire
from extender.http.answers import VerbError
from extender.http.reload import ConfigWatcher
from extender.http.verbs import Scheduler
from extender.kube.recovery import recover
from extender.ops.metrics import Metrics
from extender.standalone import EXAMPLE_CONFIG, MemoryBinder
from tests.extender.helpers import SPEC, Clock, args, fc_annotations, place, pod, run, spec
from topology.core import Core
from topology.decisions import GangPlacement, PodPlacement, UserError
from topology.invariants import violations

PIN = "nlp-pin"


def config(topogang: str = "", *, pinned: bool = False) -> LoadedConfig:
    """The example cluster with `topogang` lines added to its `topogang:` section (and, with
    `pinned`, its last node pinned to nlp)."""
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8")
    if pinned:
        text = text.replace(
            "    - cellAddress: a100-r3-n4\n", f"    - cellAddress: a100-r3-n4\n      pinnedCellId: {PIN}\n"
        )
        text = text.replace(
            "      cellNumber: 3\n  research:",
            f"      cellNumber: 3\n    pinnedCells: [{{pinnedCellId: {PIN}}}]\n  research:",
        )
    return load_config_text(text + topogang, "example-cluster.yaml")


STRICT = """\
  defaultEntitlement: opportunistic
  tenants:
    research: {maxPriority: 100}
    nlp-b: {virtualClusters: [nlp], pinnedCellIds: []}
"""


def make(loaded: LoadedConfig, flag: str | None = None, **kw: Any) -> tuple[Scheduler, list[str]]:
    evicted: list[str] = []

    async def evict(uids: Any, why: Disruption) -> None:
        evicted.extend(uids)

    s = Scheduler(
        Core(loaded.spec),
        MemoryBinder(),
        metrics=Metrics(),
        clock=Clock(),
        namespace_vcs=loaded.extras.namespace_virtual_clusters,
        evictor=evict,
        preempt_on_filter=True,
        **kw,
    )
    s.entitlement.configure(loaded.extras, flag)
    s.ready = True
    return s, evicted


def state(s: Scheduler) -> list[tuple[str, int, str | None, tuple[Any, ...]]]:
    """Every gang with its priority, its lazy preemptor and where its pods are."""
    return sorted(
        (g.name, g.request.priority, g.downgraded_by, tuple(s.core.placement_of(g).pods))
        for g in s.core.gangs()
    )


def classed(p: dict[str, Any], name: str, value: int) -> dict[str, Any]:
    """The pod as admission leaves it with PriorityClass `name` of `value`."""
    p["spec"]["priorityClassName"] = name
    p["spec"]["priority"] = value
    return p


async def fill_vision(s: Scheduler) -> None:
    """Vision's whole guaranteed quota in use by two running gangs (a rack and two nodes)."""
    for i in range(4):
        _, node = await place(s, pod(f"r{i}", f"rack-{i}", "vision", spec("vision", 8, 4, "vision/rack")))
        assert node is not None
    for i in range(2):
        _, node = await place(s, pod(f"p{i}", f"pair-{i}", "vision", spec("vision", 8, 2, "vision/pair")))
        assert node is not None


async def settle() -> None:
    """Let the evictions the verbs spawned run."""
    for _ in range(3):
        await asyncio.sleep(0)


def attack(i: int = 0, ns: str = "intruder") -> dict[str, Any]:
    return pod(f"x{i}", f"x-{i}", ns, spec("vision", 8, 6, "take/vision", priority=1000))


# ------------------------------------------------------------------------------------ the attack
def test_the_attack_is_refused_naming_namespace_vc_priority_and_key_and_nothing_changes() -> None:
    async def go() -> None:
        s, evicted = make(config(STRICT))
        await fill_vision(s)
        before = state(s)
        r = await s.filter(args(attack()))
        await settle()
        assert r["NodeNames"] is None or r["NodeNames"] == []
        err = r["Error"]
        for words in ("User Error", "intruder", "'vision'", "1000", "topogang.tenants.intruder"):
            assert words in err, err
        assert state(s) == before and evicted == []
        assert s.core.gang("take/vision") is None
        # preempt (kube-scheduler's dry run) refuses it too, with the same words
        with pytest.raises(VerbError, match=r"topogang\.tenants\.intruder"):
            await s.preempt(wire.parse_preemption_args({"Pod": attack(), "NodeNameToVictims": {}}))
        assert state(s) == before and evicted == []

    run(go())


def test_without_entitlement_the_same_pod_preempts_vision_hiveds_trust() -> None:
    """The control: in mode open (a HiveD config as is) the attack works, so the test above can fail."""

    async def go() -> None:
        s, evicted = make(config())
        await fill_vision(s)
        await s.filter(args(attack()))
        await settle()
        assert evicted, "mode open lets any namespace preempt vision"

    run(go())


def test_the_serve_flag_closes_a_config_that_sets_no_mode_and_the_file_wins_over_it() -> None:
    async def go() -> None:
        s, evicted = make(config(), "opportunistic")
        await fill_vision(s)
        r = await s.filter(args(attack()))
        await settle()
        assert "may run only opportunistic pods" in r["Error"] and evicted == []
        s2, _ = make(config("  defaultEntitlement: open\n"), "none")
        assert s2.entitlement.rules.mode == "open"

    run(go())


# ---------------------------------------------------------------------------------- the rules
def request_of(s: Scheduler, p: Mapping[str, Any]) -> Any:
    return run(s.request_of(wire.parse_pod(p))).request


def test_a_tenant_is_capped_at_its_max_priority_and_kept_to_its_vcs() -> None:
    s, _ = make(config(STRICT))
    assert request_of(s, pod("a", "a", "research", spec("research", 4, priority=100))).priority == 100
    with pytest.raises(
        EntitlementError, match=r"at most 100, not 101 .*topogang\.tenants\.research\.maxPriority"
    ):
        request_of(s, pod("b", "b", "research", spec("research", 4, priority=101)))
    with pytest.raises(
        EntitlementError, match=r"may not use VC 'nlp' at priority 0.*research\.virtualClusters"
    ):
        request_of(s, pod("c", "c", "research", spec("nlp", 8, priority=0)))
    # opportunistic work uses no quota and preempts nobody: any VC may carry it...
    assert request_of(s, pod("d", "d", "research", spec("nlp", 8, priority=-1))).priority == -1
    # ...unless it would be promoted into the VC's quota later
    with pytest.raises(EntitlementError, match="may not use VC 'nlp'"):
        request_of(s, pod("e", "e", "research", spec("nlp", 8, priority=-1, promoteWhenQuota=True)))
    # a namespace's own namespaceVirtualClusters VC is allowed at every priority
    assert request_of(s, pod("f", "f", "nlp", spec("nlp", 8, priority=1000))).priority == 1000


def test_pinned_cells_need_the_vc_and_the_tenants_list() -> None:
    s, _ = make(config(STRICT, pinned=True))
    pinned = json.dumps({"virtualCluster": "nlp", "pinnedCellId": PIN, "leafCellNumber": 8})
    assert request_of(s, pod("a", "a", "nlp", pinned)).pinned_cell_id == PIN  # its VC's pins: all
    with pytest.raises(
        EntitlementError, match=r"pinned cell 'nlp-pin'.*topogang\.tenants\.nlp-b\.pinnedCellIds"
    ):
        request_of(s, pod("b", "b", "nlp-b", pinned))
    low = json.dumps({"virtualCluster": "nlp", "pinnedCellId": PIN, "leafCellNumber": 8, "priority": -1})
    with pytest.raises(EntitlementError, match="may not use a pinned cell of VC 'nlp'"):
        request_of(s, pod("c", "c", "research", low))


def test_mode_none_refuses_unlisted_namespaces_but_keeps_mapped_ones() -> None:
    s, _ = make(config("  defaultEntitlement: none\n"))
    with pytest.raises(
        EntitlementError, match=r"namespace stray may use no VC .topogang.defaultEntitlement is none"
    ):
        request_of(s, pod("a", "a", "stray", spec("vision", 8, priority=-1)))
    assert request_of(s, pod("b", "b", "vision", spec("vision", 8, priority=1000))).vc == "vision"


def test_conventions_pods_are_held_to_the_same_rules() -> None:
    s, evicted = make(config(STRICT))
    gpu_pod = {
        "metadata": {
            "uid": "g1",
            "name": "g1",
            "namespace": "intruder",
            "labels": {"topogang.io/virtual-cluster": "vision"},
        },
        "spec": {
            "schedulerName": "topogang",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Pending"},
    }
    r = run(s.filter(args(gpu_pod)))
    assert "intruder" in r["Error"] and "'vision'" in r["Error"], r
    assert s.core.gangs() == [] and evicted == []
    # in its own VC a conventions gang takes its PriorityClass's priority (capped by maxPriority)
    own = json.loads(json.dumps(gpu_pod))
    own["metadata"].update(namespace="research", labels={})
    own["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    assert request_of(s, classed(own, "team-high", 800)).priority == 100


# --------------------------------------------------------------------- priority from Kubernetes
@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (500, None, 500),  # the class's priority is the default...
        (500, 200, 200),  # ...the spec's may lower it...
        (500, -1, -1),  # ...down to opportunistic
        (2_000_000_000, None, 1000),  # system classes map to the top of topogang's range
        (-5, None, 0),  # a negative class never makes a gang opportunistic by itself
    ],
)
def test_priority_comes_from_the_priority_class(value: int, annotation: int | None, expected: int) -> None:
    s, _ = make(config())
    extra: dict[str, Any] = {} if annotation is None else {"priority": annotation}
    p = classed(pod("a", "a", "vision", spec("vision", 8, **extra)), "c", value)
    assert request_of(s, p).priority == expected


def test_the_spec_may_lower_the_class_priority_but_never_raise_it() -> None:
    s, _ = make(config())
    p = classed(pod("a", "a", "vision", spec("vision", 8, priority=600)), "team-mid", 500)
    with pytest.raises(EntitlementError, match=r"asks for priority 600 .*above its PriorityClass team-mid"):
        request_of(s, p)
    r = run(s.filter(args(p)))
    assert "team-mid" in r["Error"] and s.core.gangs() == []
    # without a class the spec's priority holds (HiveD's pods), within the namespace's maxPriority
    assert request_of(s, pod("b", "b", "vision", spec("vision", 8, priority=600))).priority == 600
    # a class beyond a tenant's maxPriority is capped, a spec asking beyond it is refused
    t, _ = make(config(STRICT))
    assert request_of(t, classed(pod("c", "c", "research", spec("research", 4)), "hi", 900)).priority == 100


def test_a_pod_with_a_class_name_but_no_resolved_priority_is_judged_by_its_spec() -> None:
    """Only admission fills `spec.priority`; a name alone (a pod posted to standalone) means nothing."""
    p = pod("a", "a", "vision", spec("vision", 8, priority=300))
    p["spec"]["priorityClassName"] = "whatever"
    s, _ = make(config())
    assert request_of(s, p).priority == 300


def test_explain_holds_the_pod_to_the_same_rules() -> None:
    s, _ = make(config(STRICT))
    with pytest.raises(EntitlementError, match=r"topogang\.tenants\.intruder"):
        podrequests.explained(s, wire.parse_pod(attack()))
    ok = podrequests.explained(
        s, wire.parse_pod(classed(pod("a", "a", "vision", spec("vision", 8)), "c", 40))
    )
    assert ok.request.priority == 40


def test_a_refusal_is_told_once_per_read_to_the_gate_listener() -> None:
    s, _ = make(config(STRICT))
    heard: list[tuple[str, str]] = []
    s.entitlement.on_refused = lambda pr, err: heard.append((pr.namespace, err.field))
    run(s.filter(args(attack())))
    assert heard == [("intruder", "priority")]


def test_grant_is_a_user_error_and_open_rules_change_nothing() -> None:
    loaded = config()
    s, _ = make(loaded)
    pr = podrequests.parse(s, wire.parse_pod(attack()))
    assert grant(Entitlements.open(), pr, attack()) is pr
    assert issubclass(EntitlementError, UserError)


# --------------------------------------------------------------------------- the property
NAMESPACES = ("vision", "nlp", "research", "intruder", "stray")


def entitled(ns: str, vc: str, priority: int) -> bool:
    """The STRICT config's rules, written out independently of the module under test."""
    if priority < 0:
        return True
    if ns in ("vision", "nlp", "research"):
        return vc == ns and (ns != "research" or priority <= 100)
    return False


pods = st.lists(
    st.tuples(
        st.sampled_from(NAMESPACES),
        st.sampled_from(("vision", "nlp", "research")),
        st.sampled_from((-1, 0, 50, 100, 101, 500, 1000)),
        st.sampled_from((1, 2, 4)),  # pods
        st.sampled_from((4, 8)),  # GPUs each
        st.booleans(),  # with a PriorityClass of value 700
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods)
def test_a_pod_without_entitlement_never_preempts_and_never_takes_another_vcs_quota(
    gangs: list[tuple[str, str, int, int, int, bool]],
) -> None:
    async def go() -> None:
        s, evicted = make(config(STRICT))
        owner: dict[str, tuple[str, int]] = {}  # group -> (namespace, its index)
        for i, (ns, vc, priority, n, gpus, with_class) in enumerate(gangs):
            group = f"{ns}-g{i}"
            owner[group] = (ns, i)
            before, evictions = state(s), len(evicted)
            r: dict[str, Any] = {}
            for j in range(n):
                p = pod(f"u{i}-{j}", f"g{i}-{j}", ns, spec(vc, gpus, n, group, priority=priority))
                if with_class:
                    classed(p, "team", 700)
                r, _ = await place(s, p)
                await settle()
                if r.get("Error"):
                    break
            asked = min(priority, 700) if with_class else priority
            if with_class and priority > 700:
                asked = priority  # refused: above its class
            if r.get("Error") and "User Error" in r["Error"]:
                assert state(s) == before and len(evicted) == evictions, r["Error"]
            if not entitled(ns, vc, asked):
                assert len(evicted) == evictions, f"{group} ({ns} -> {vc} at {asked}) caused a preemption"
            for g in s.core.gangs():
                gns, _ = next(v for k, v in owner.items() if g.name.endswith(k))
                req = g.request
                if req.priority >= 0:
                    assert entitled(gns, req.vc, req.priority), f"{g.name} holds {req.vc} quota"

    run(go())


def test_a_config_reload_replaces_the_rules_and_keeps_the_serve_flag(tmp_path: Path) -> None:
    async def go() -> None:
        path = tmp_path / "c.yaml"
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path.write_text(base, encoding="utf-8")
        s, _ = make(config(), "opportunistic")
        watcher = ConfigWatcher(s, path, clock=Clock())
        path.write_text(base + "  tenants:\n    intruder: {virtualClusters: [vision], maxPriority: 1000}\n")
        assert await watcher.check() == "applied"
        assert s.entitlement.rules.mode == "opportunistic"
        assert (await s.request_of(wire.parse_pod(attack()))).request.priority == 1000  # now allowed
        path.write_text(base + "  tenants:\n    intruder: {maxPriority: 5}\n")
        assert await watcher.check() == "applied"
        with pytest.raises(EntitlementError, match=r"may not use VC 'vision'|at most 5"):
            await s.request_of(wire.parse_pod(attack()))

    run(go())


def test_a_pod_beyond_both_its_vcs_and_its_priority_is_told_both_keys() -> None:
    s, _ = make(config(STRICT))
    with pytest.raises(EntitlementError) as info:
        request_of(s, pod("a", "a", "research", spec("nlp", 8, priority=1000)))
    assert info.value.message == (
        "namespace research may ask for priority at most 100, not 1000 (VC 'nlp'): raise "
        "topogang.tenants.research.maxPriority and add 'nlp' to topogang.tenants.research.virtualClusters "
        "to allow it"
    )


# --------------------------------------------------------------------- recovery
def test_a_bound_pods_spec_edited_since_comes_back_as_decided_after_a_restart() -> None:
    """A pod's annotations stay editable once it is bound, and recovery reads its spec again. Edited
    specs come back as the signed bind info records them: an opportunistic pod of a namespace that
    may run nothing else, rewritten to priority 1000 with promoteWhenQuota, stays opportunistic and
    unpromotable; a capped tenant's pod stays at its cap; pods rewritten within their namespace's
    rights keep the VC and priority they were placed with, an opportunistic one too (found by the
    soak with hostile tenants)."""
    loaded = config(STRICT)
    s, _ = make(loaded)
    guest = pod("u-i", "guest", "intruder", spec("nlp", 2, priority=-1))
    capped = pod("u-r", "capped", "research", spec("research", 2, priority=100))
    own = pod("u-n", "own", "nlp", spec("nlp", 2))
    guest_at_home = pod("u-o", "home", "nlp", spec("nlp", 2, priority=-1))
    for p in (guest, capped, own, guest_at_home):
        assert run(place(s, p))[1] is not None
    edits = {
        "u-i": spec("nlp", 2, priority=1000, promoteWhenQuota=True),
        "u-r": spec("research", 2, priority=1000),
        "u-n": spec("vision", 2, priority=1000),
        "u-o": spec("nlp", 2, priority=1000),  # within its namespace's rights, yet not as decided
    }
    pods = []
    for p in (guest, capped, own, guest_at_home):
        b = s.binder.bound[p["metadata"]["uid"]]  # type: ignore[attr-defined]
        q = json.loads(json.dumps(p))
        q["metadata"]["annotations"].update(b.annotations)
        q["metadata"]["annotations"][SPEC] = edits[p["metadata"]["uid"]]
        q["spec"]["nodeName"], q["status"] = b.node, {"phase": "Running"}
        pods.append(q)
    fresh = Core(loaded.spec)
    report = recover(
        fresh,
        pods,
        now=0.0,
        namespace_vcs=loaded.extras.namespace_virtual_clusters,
        entitle=lambda pr, p, held: grant(s.entitlement.rules, pr, p, held=held),
    )
    got = {g.name: g for g in fresh.gangs()}
    assert set(got) == {"intruder/pod:guest", "research/pod:capped", "nlp/pod:own", "nlp/pod:home"}, (
        report.lines()
    )
    g = got["intruder/pod:guest"]
    assert (g.request.vc, g.request.priority, g.request.promote_when_quota, g.priority) == (
        "nlp",
        -1,
        False,
        -1,
    )
    assert got["research/pod:capped"].request.priority == 100
    assert (got["nlp/pod:own"].request.vc, got["nlp/pod:own"].request.priority) == ("nlp", 0)
    assert got["nlp/pod:home"].request.priority == -1
    assert sum("edited since its bind" in n for n in report.notes) == 4, report.notes
    assert violations(fresh) == []


def as_bound(s: Scheduler, p: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server has it once `s` bound it: bind info written, running on its node."""
    b = s.binder.bound[p["metadata"]["uid"]]  # type: ignore[attr-defined]
    q: dict[str, Any] = json.loads(json.dumps(p))
    q["metadata"]["annotations"].update(b.annotations)
    q["spec"]["nodeName"], q["status"] = b.node, {"phase": "Running"}
    return q


def test_a_max_priority_lowered_by_a_reload_takes_nothing_back_from_a_running_gang(tmp_path: Path) -> None:
    """Entitlements judge what is asked from then on; a gang already given its priority keeps it,
    with or without a restart in between. Before, a gang whose priority came from its PriorityClass
    came back at the new `maxPriority` after a restart (100 -> 50) while a spec's explicit priority
    came back at 100, and neither changed without a restart. New pods are held to the new rule."""

    async def go() -> None:
        path = tmp_path / "c.yaml"
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path.write_text(base + STRICT, encoding="utf-8")
        loaded = config(STRICT)
        s, _ = make(loaded)
        watcher = ConfigWatcher(s, path, clock=Clock())
        by_class = classed(pod("u-c", "by-class", "research", spec("research", 2)), "top", 1000)
        by_spec = pod("u-s", "by-spec", "research", spec("research", 2, priority=100))
        for p in (by_class, by_spec):
            assert (await place(s, p))[1] is not None
        given = {g.name: g.request.priority for g in s.core.gangs()}
        assert given == {"research/pod:by-class": 100, "research/pod:by-spec": 100}
        path.write_text(base + STRICT.replace("maxPriority: 100", "maxPriority: 50"), encoding="utf-8")
        assert await watcher.check() == "applied"
        assert {g.name: g.request.priority for g in s.core.gangs()} == given  # running on: kept
        late = classed(pod("u-l", "late", "research", spec("research", 2)), "top", 1000)
        assert (await s.request_of(wire.parse_pod(late))).request.priority == 50  # new asks: the new rule
        with pytest.raises(EntitlementError, match="at most 50"):
            await s.request_of(wire.parse_pod(pod("u-m", "m", "research", spec("research", 2, priority=100))))
        fresh = Core(loaded.spec)
        report = recover(
            fresh,
            [as_bound(s, by_class), as_bound(s, by_spec)],
            now=0.0,
            namespace_vcs=loaded.extras.namespace_virtual_clusters,
            entitle=lambda pr, q, held: grant(s.entitlement.rules, pr, q, held=held),
        )
        assert {g.name: g.request.priority for g in fresh.gangs()} == given, report.lines()  # restarted: kept
        assert report.notes == [] and violations(fresh) == []

    run(go())


@pytest.mark.parametrize("revoked", [False, True])
def test_a_reload_that_takes_a_vc_away_stops_the_namespaces_gangs_being_promoted_into_it(
    tmp_path: Path, revoked: bool
) -> None:
    """An opted-in opportunistic gang becomes guaranteed once its VC has room. Once a reload takes
    that VC away from its namespace, it stays opportunistic (promotion would be a new grant of the
    VC's quota), as a restart under the new rules rebuilds it from its bind info. A guaranteed gang
    of that namespace that opted in too keeps what it holds, and its opt-in is dropped as a restart
    drops it (found by the hostile soak's restart check, seeds 29 and 202)."""

    async def go() -> None:
        path = tmp_path / "c.yaml"
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path.write_text(base + "  tenants:\n    lab: {virtualClusters: [nlp]}\n", encoding="utf-8")
        s, _ = make(config("  tenants:\n    lab: {virtualClusters: [nlp]}\n"))
        watcher = ConfigWatcher(s, path, clock=Clock())
        big = [pod(f"b{i}", f"big-{i}", "nlp", spec("nlp", 8, 2, "nlp/big")) for i in range(2)]
        kept = pod("k", "kept", "lab", spec("nlp", 8, promoteWhenQuota=True))  # guaranteed: nlp's third node
        for p in [*big, kept]:
            assert (await place(s, p))[1] is not None
        opp = pod("o", "opp", "lab", spec("nlp", 8, priority=-1, promoteWhenQuota=True))
        assert (await place(s, opp))[1] is not None
        if revoked:
            path.write_text(base + "  tenants:\n    lab: {virtualClusters: [vision]}\n", encoding="utf-8")
            assert await watcher.check() == "applied"
            assert any("lab/pod:opp is no longer promoted" in line for line in watcher.status.last_report)
        for p in big:  # nlp's quota frees
            await s.pod_gone(p["metadata"]["uid"])
        g = s.core.gang("lab/pod:opp")
        assert g is not None and g.priority == (-1 if revoked else 0)
        assert g.request.promote_when_quota is not revoked
        k = s.core.gang("lab/pod:kept")
        assert k is not None and k.priority == 0 and k.request.promote_when_quota is not revoked
        fresh = Core(config().spec)
        recover(
            fresh,
            [as_bound(s, opp), as_bound(s, kept)],
            now=0.0,
            entitle=lambda pr, q, held: grant(s.entitlement.rules, pr, q, held=held),
        )
        for name, before in (("lab/pod:opp", g), ("lab/pod:kept", k)):
            again = fresh.gang(name)
            assert again is not None
            assert again.request.promote_when_quota is before.request.promote_when_quota, name
        assert violations(s.core) == []

    run(go())


def test_a_priority_class_priority_survives_a_restart() -> None:
    """A gang whose priority came from its PriorityClass (the spec names none) comes back at that
    priority after a restart, as its next member's filter reads it, not at the spec's default 0."""
    loaded = config(STRICT)
    s, _ = make(loaded)
    p = classed(pod("u-c", "classy", "nlp", spec("nlp", 2, 2, "nlp/classy")), "team-high", 500)
    assert run(place(s, p))[1] is not None
    fresh = Core(loaded.spec)
    recover(
        fresh,
        [as_bound(s, p)],
        now=0.0,
        namespace_vcs=loaded.extras.namespace_virtual_clusters,
        entitle=lambda pr, pod, held: grant(s.entitlement.rules, pr, pod, held=held),
    )
    g = fresh.gang("nlp/classy")
    assert g is not None and g.request.priority == 500 == s.core.gang("nlp/classy").request.priority  # type: ignore[union-attr]


def test_a_gang_rebuilt_from_its_bind_info_keeps_the_priority_it_records() -> None:
    """A FrameworkController task shaped by its Framework object names no gang in its spec, so
    recovery rebuilds the gang from the bind info; the pod's PriorityClass (value 0) must not raise
    the -1 the bind info records (found by the soak's restart check, hostile seed 68)."""
    loaded = config(STRICT)
    s, _ = make(loaded)
    node = "a100-r3-n1"
    placement = GangPlacement(
        gang="research/fw/0_a",
        vc="research",
        chain="A100-RACK",
        priority=-1,
        requested_priority=-1,
        pods=(PodPlacement(0, node, (0, 1), None),),
        lca_level=0,
        nodes=(node,),
    )
    task = fc_annotations("research", "fw", "0_a", "worker", 0)
    p = classed(
        pod("u-t", "fw-worker-0", "research", spec("research", 2, priority=-1), annotations=task), "c", 0
    )
    p["metadata"]["annotations"][BIND_INFO_ANNOTATIONS[0]] = encode_bind_info(placement, node, (0, 1), 0)
    p["spec"]["nodeName"], p["status"] = node, {"phase": "Running"}
    fresh = Core(loaded.spec)
    recover(fresh, [p], now=0.0, entitle=lambda pr, q, held: grant(s.entitlement.rules, pr, q, held=held))
    g = fresh.gang("research/fw/0_a")
    assert g is not None and (g.request.priority, g.priority) == (-1, -1)
