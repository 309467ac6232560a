"""A running gang a lazy preemption downgraded, across a restart or a fail-over of the Kubernetes-mode
service, against the in-memory API server.

Nothing in its pods can say it was downgraded (its signed bind info was written at bind, before the
downgrade; their annotations are its owner's to write), so it came back as any opportunistic gang
that opted in to `promoteWhenQuota`: promoted, and its bind info rewritten so, at the next release
that freed its VC's quota, where the process that downgraded it would have left it alone. Its
`GangReservation` object, in the extender's own namespace, now records the downgrade while it lasts.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from extender.gangs import reservation_objects as rsv
from extender.gangs.bindinfo import pod_bind_info
from extender.kube.client import pod_path
from extender.kube.leader import LeaseSettings
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, example, run, spec
from tests.extender.test_kube_durable import COLLECTION, NS, Running, cluster, start, submit, until
from topology.core import Core
from topology.decisions import Bind, GangPlacement, GangRequest, Member
from topology.invariants import violations

KEY = b"downgrade-test-signing-key-32-by"  # recovery adopts only bind info this key signed
RESEARCH = "research"  # four 4-GPU halves of quota in the example cluster: the low gang fills it
LOW = "research/low"
HIGH = "research/pod:hi"
LOW_SPEC = spec(RESEARCH, 4, 4, LOW, priority=10, lazyPreemptionEnable=True, promoteWhenQuota=True)
CRD = (
    Path(__file__).resolve().parents[2] / "deploy" / "helm" / "topogang" / "crds" / "gangreservation-crd.yaml"
)
TYPES: dict[str, type | tuple[type, ...]] = {
    "object": Mapping,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


def gone(kube: FakeKube, name: str) -> None:
    kube.server.delete(pod_path(RESEARCH, name), {"gracePeriodSeconds": 0})


def objects(kube: FakeKube) -> dict[str, dict[str, Any]]:
    return {o["spec"]["gang"]: o for o in kube.server.list(COLLECTION)[0]}


def bind_infos(kube: FakeKube) -> list[Any]:
    out = []
    for i in range(4):
        pod = kube.server.at(pod_path(RESEARCH, f"low-{i}"))
        out.append(pod_bind_info(pod["metadata"]["annotations"]))
    return out


async def downgraded(r: Running, kube: FakeKube) -> None:
    """The low gang runs whole on research's quota; the high one comes and downgrades it lazily."""
    for i in range(4):
        await r.place(submit(kube, f"l{i}", f"low-{i}", RESEARCH, LOW_SPEC))
    await r.place(submit(kube, "h0", "hi", RESEARCH, spec(RESEARCH, 4, priority=100)))
    g = r.s.core.gang(LOW)
    assert g is not None and g.priority < 0 and g.downgraded_by == HIGH


def assert_still_downgraded(r: Running) -> None:
    g = r.s.core.gang(LOW)
    assert g is not None, LOW
    assert g.priority == -1, f"promoted or guaranteed: {g.history}"
    assert (g.downgraded_by, g.guest) == (HIGH, False), g.history


def test_a_downgraded_gang_is_not_promoted_after_a_restart_when_its_vc_gets_quota_back() -> None:
    """Without a restart, the high gang's end leaves the low one opportunistic (HiveD's rule). After a
    restart it must too: before the record it was promoted, its bind info rewritten so."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        await downgraded(a, kube)
        await a.stop()  # a crash: no last sync

        clock.t += 30
        b = await start(kube, clock, signing_key=KEY)
        before = bind_infos(kube)
        gone(kube, "hi")  # research's quota frees up
        await until("the high gang released", lambda: b.s.core.gang(HIGH) is None)
        await b.s.expire()  # the periodic pass that writes promotions back
        assert_still_downgraded(b)
        assert bind_infos(kube) == before and not b.s.promotions.pending
        assert violations(b.s.core) == []
        await until("the record kept", lambda: LOW in objects(kube))
        await b.stop()

    run(go())


def test_the_record_is_written_with_the_preemptor_and_tells_no_phase_the_crd_lacks() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        await downgraded(a, kube)
        record = objects(kube)[LOW]  # written before the high gang's filter answered
        assert record["metadata"]["annotations"][rsv.DOWNGRADED_BY] == HIGH
        assert "phase" not in record["status"]  # the CRD knows a reservation's phases, not Bound
        assert {t for sl in record["spec"]["slots"] for t in sl["cellTypes"]} == {""}
        await a.stop()

    run(go())


def test_the_record_goes_with_the_gang_and_none_is_kept_for_a_gang_not_downgraded() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        await downgraded(a, kube)
        # the high gang's reservation went once it was bound; the low gang's record stays
        await until("only the downgraded gang's object", lambda: sorted(objects(kube)) == [LOW])
        for i in range(4):
            gone(kube, f"low-{i}")
        await until("the low gang released", lambda: a.s.core.gang(LOW) is None)
        await until("its record deleted", lambda: objects(kube) == {})
        await a.stop()

    run(go())


def test_a_record_whose_gang_ended_just_before_a_crash_brings_nothing_back() -> None:
    """Released between two syncs, just before a crash: the record is all that is left of the gang,
    and it is no reservation (its gang ran whole): nothing is brought back, even for pods that may
    claim one of its name."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        await downgraded(a, kube)
        await a.stop()
        for i in range(4):
            gone(kube, f"low-{i}")
        # its job submitted again under the same name: these pods may claim a reservation of it
        for i in range(4):
            submit(kube, f"again-{i}", f"again-{i}", RESEARCH, LOW_SPEC)
        b = await start(kube, clock, signing_key=KEY)
        assert b.s.core.gang(LOW) is None  # they are placed afresh, not on the old gang's GPUs
        await until("its record deleted", lambda: LOW not in objects(kube))
        await b.stop()

    run(go())


def test_a_standby_that_takes_over_keeps_the_gang_downgraded_and_its_preemptor_guaranteed() -> None:
    """The standby adopted the low gang from its pods while the leader ran it guaranteed, and never
    saw the downgrade (a standby serves no verbs): it reads the record when it takes the lead. The
    high gang's pods, bound after, found research's quota held by the low gang in the standby's
    view: adopted as opportunistic, any VC's guaranteed gang could have preempted it. Once the
    record gives the quota back, the high gang runs guaranteed on it again, as under the leader."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        # long enough that a leader placing five pods on a loaded machine keeps its lease
        lease = LeaseSettings(NS, "lead", lease_seconds=2.0, renew_deadline=1.5, retry_seconds=0.05)
        a = await start(kube, clock, lease=lease, identity="a", signing_key=KEY)
        b = Running(
            kube_service(
                example(), kube, clock=clock, namespace=NS, lease=lease, identity="b", signing_key=KEY
            )
        )
        await until("b synced, as standby", lambda: b.s.not_ready_reason.endswith("held by a"))
        await downgraded(a, kube)
        await until("b saw every pod bound", lambda: all(b.s.core.holds_slot(u) for u in ("l0", "l3", "h0")))
        await a.stop()  # the leader dies without releasing: b waits out the lease, then leads
        await until("b leads", lambda: b.s.ready, 30)
        assert_still_downgraded(b)
        high = b.s.core.gang(HIGH)
        assert high is not None, HIGH
        assert (high.priority, high.guest) == (100, False), high.history
        assert b.s.core.owners[high.owner].vc == RESEARCH, high.history
        assert violations(b.s.core) == []
        gone(kube, "hi")
        await until("the high gang released", lambda: b.s.core.gang(HIGH) is None)
        await b.s.expire()
        assert_still_downgraded(b)
        assert violations(b.s.core) == []
        await b.stop()

    run(go())


def schema_errors(value: Any, schema: Mapping[str, Any], at: str) -> list[str]:
    """What the API server would refuse (a type, a required field, an enum) or prune (a field the
    structural schema does not declare) of `value`, for the part of OpenAPI v3 the CRD uses."""
    if value is None:
        return [] if schema.get("nullable") else [f"{at}: null"]
    kind, is_bool = schema.get("type"), isinstance(value, bool)  # a bool is an int to Python, not to JSON
    if kind is not None and (not isinstance(value, TYPES[kind]) or is_bool != (kind == "boolean")):
        return [f"{at}: {value!r} is not {kind}"]
    errors = [f"{at}: {value!r} not in {schema['enum']}"] if value not in schema.get("enum", [value]) else []
    if kind == "object":
        props = schema.get("properties", {})
        errors += [f"{at}.{r}: required" for r in schema.get("required", []) if r not in value]
        for k, v in value.items():
            errors += schema_errors(v, props[k], f"{at}.{k}") if k in props else [f"{at}.{k}: pruned"]
    elif kind == "array":
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{at}[{i}]")
    return errors


def test_a_downgrade_record_is_one_the_crd_admits_whole() -> None:
    """The API server validates the object against the CRD's schema (its `status` included: there is
    no status subresource) and prunes what it does not declare: a whole gang's phase, `Bound`, is
    not one of its phases, and a preemptor kept in a field the schema lacks would be dropped."""
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    core = Core(example().spec)
    low = GangRequest(
        LOW, RESEARCH, (Member(4, 4),), priority=10, lazy_preemption=True, promote_when_quota=True
    )
    for i in range(4):
        assert isinstance(core.schedule(low, f"l{i}", 4, 1.0), Bind)
    high = GangRequest(HIGH, RESEARCH, (Member(1, 4),), priority=100)
    assert isinstance(core.preempt(high, 2.0), GangPlacement)
    wall = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    g, h = core.gang(LOW), core.gang(HIGH)
    assert g is not None and g.downgraded_by == HIGH and h is not None
    for gang in (g, h):  # whole and downgraded; reserved, not bound yet
        body = rsv.encode(core, gang, clock_now=2.0, wall_now=wall)
        annotations = body["metadata"].get("annotations", {})
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in annotations.items())
        errors = [e for part in ("spec", "status") for e in schema_errors(body[part], schema[part], part)]
        assert errors == [], gang.name
