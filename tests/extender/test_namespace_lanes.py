"""Tenants stay in their own lane: a gang belongs to one namespace.

Hypothesis drives the scheduler's verbs (filter, bind, pod deletion) with pods of two namespaces:
`vision` runs its gangs (an affinity group written `train` or `vision/train`, a FrameworkController
attempt `vision/llm/att-1`, a one-pod gang), while `evil` files pods that name every one of those
names, with other shapes, with FrameworkController annotations claiming `vision`, or as one-pod
pods of the same names. After every step no pod holds a slot of, or is a ledger member of, a gang
of another namespace; at the end vision's gangs still place and bind whole, with vision's pods only.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.gangs.identity import explicit_key, gang_key, is_one_pod, one_pod_key, split_key
from extender.http.verbs import Scheduler
from extender.kube.recovery import recover
from extender.standalone import MemoryBinder
from tests.extender.helpers import args, bind_args, example, fc_annotations, pod, run, scheduler
from tests.extender.test_kube_edge import bound_pods
from topology.core import Core
from topology.decisions import UserError
from topology.invariants import violations

VICTIM, EVIL = "vision", "evil"
# every name an intruder may write for a gang of vision's (and vision's one-pod pod's own names)
STOLEN = [
    "train",
    "vision/train",
    "llm/att-1",
    "vision/llm/att-1",
    "solo",
    "vision/solo",
    "pod:solo",
    "vision/pod:solo",
]


def group_spec(vc: str, gpus: int, pods: int, name: str, role: str | None = None) -> str:
    member: dict[str, Any] = {"podNumber": pods, "leafCellNumber": gpus}
    if role is not None:
        member["taskRole"] = role
    return json.dumps(
        {"virtualCluster": vc, "leafCellNumber": gpus, "affinityGroup": {"name": name, "members": [member]}}
    )


def victim_pods(train_name: str) -> list[dict[str, Any]]:
    """vision's jobs: a 2 x 8 affinity group, a 2 x 8 FrameworkController attempt, a one-pod gang."""
    out = [
        pod(f"v-train-{i}", f"train-{i}", VICTIM, group_spec("vision", 8, 2, train_name)) for i in range(2)
    ]
    out += [
        pod(
            f"v-llm-{i}",
            f"llm-w-{i}",
            VICTIM,
            group_spec("vision", 8, 2, "anything", role="w"),
            annotations=fc_annotations(VICTIM, "llm", "att-1", "w", i),
        )
        for i in range(2)
    ]
    out.append(pod("v-solo", "solo", VICTIM, json.dumps({"virtualCluster": "vision", "leafCellNumber": 4})))
    return out


VICTIM_GANGS = {"vision/train": 2, "vision/llm/att-1": 2, "vision/pod:solo": 1}

intruder: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    kind=st.sampled_from(["group", "fc-theirs", "fc-own", "single"]),
    name=st.sampled_from(STOLEN),
    gpus=st.sampled_from([4, 8]),
    pods=st.integers(1, 2),
    serial=st.integers(0, 5),
)
step = st.one_of(
    st.tuples(st.just("intrude"), intruder),
    st.tuples(st.just("bind-intruder"), st.integers(0, 5)),
    st.tuples(st.just("delete-intruder"), st.integers(0, 5)),
    st.tuples(st.just("victim"), st.integers(0, 4)),
    st.tuples(st.just("squat-inside"), st.sampled_from(["pod:solo", "vision/pod:solo"])),
)


def intruder_pod(i: dict[str, Any]) -> dict[str, Any]:
    uid = f"e-{i['serial']}"
    name = str(i["name"]).replace("/", "-").replace(":", "-") if i["kind"] != "single" else "solo"
    text = group_spec("nlp", i["gpus"], i["pods"], i["name"])
    if i["kind"] == "single":  # a one-pod pod of the same pod name as vision's
        return pod(uid, name, EVIL, json.dumps({"virtualCluster": "nlp", "leafCellNumber": 4}))
    if i["kind"] == "group":
        return pod(uid, f"{name}-{i['serial']}", EVIL, text)
    ns = VICTIM if i["kind"] == "fc-theirs" else EVIL
    role_text = group_spec("nlp", i["gpus"], i["pods"], i["name"], role="w")
    return pod(
        uid,
        f"{name}-{i['serial']}",
        EVIL,
        role_text,
        annotations=fc_annotations(ns, "llm", "att-1", "w", 0),
    )


def check_lanes(s: Scheduler, namespace_of: dict[str, str]) -> None:
    """No pod holds a slot of, or is a ledger member of, a gang of another namespace."""
    for g in s.core.gangs():
        ns = split_key(g.name)[0]
        assert ns in (VICTIM, EVIL), g.name
        for slot in g.slots:
            if slot.pod_uid is not None:
                assert namespace_of[slot.pod_uid] == ns, (g.name, slot.pod_uid)
    for rec in s.gang_ledger.all(s.core):
        assert split_key(rec.gang)[0] == rec.ident.namespace, rec.gang
        for uid in rec.pods:
            assert namespace_of[uid] == rec.ident.namespace, (rec.gang, uid)
        doc = s.gang_ledger.status(s.core, rec, s.waiting_of)
        for m in doc["members"]:
            if m.get("podUID") is not None:
                assert namespace_of[m["podUID"]] == rec.ident.namespace, (rec.gang, m)
    assert violations(s.core) == []


async def place(s: Scheduler, p: dict[str, Any]) -> bool:
    r = await s.filter(args(p))
    names = r.get("NodeNames") or []
    if not names:
        return False
    return (await s.bind(bind_args(p, names[0]))) == {"Error": ""}


async def play(steps: list[tuple[str, Any]], train_name: str) -> None:
    s = scheduler()
    victims = victim_pods(train_name)
    namespace_of = {p["metadata"]["uid"]: VICTIM for p in victims}
    intruders: dict[int, dict[str, Any]] = {}
    serial_of: dict[str, int] = {}  # a live intruder's UID: the serial it was made with
    bound: set[str] = set()
    for kind, arg in steps:
        if kind == "intrude":
            p = intruder_pod(arg)
            uid = p["metadata"]["uid"]
            if uid in serial_of:  # one pod per UID: the old one is deleted first
                await s.pod_gone(uid)
                intruders.pop(serial_of[uid], None)
            serial_of[uid] = arg["serial"]
            intruders[arg["serial"]] = p
            namespace_of[uid] = EVIL
            got = await s.filter(args(p))
            if arg["kind"] == "fc-theirs":
                assert "FC_FRAMEWORK_NAMESPACE" in got["Error"], got
        elif kind == "bind-intruder" and arg in intruders:
            await place(s, intruders[arg])
        elif kind == "delete-intruder" and arg in intruders:
            uid = intruders.pop(arg)["metadata"]["uid"]
            serial_of.pop(uid, None)
            await s.pod_gone(uid)
        elif kind == "squat-inside":  # even vision's own pods cannot take its one-pod gang's name
            p = pod("v-squat", "squat", VICTIM, group_spec("vision", 4, 1, arg))
            namespace_of["v-squat"] = VICTIM
            got = await s.filter(args(p))
            assert "reserved for one-pod gangs" in got["Error"] and not got["NodeNames"], got
        elif kind == "victim":
            p = victims[arg]
            if p["metadata"]["uid"] not in bound and await place(s, p):
                bound.add(p["metadata"]["uid"])
        check_lanes(s, namespace_of)
    for p in victims:  # vision's gangs place and bind whole whatever came before
        if p["metadata"]["uid"] not in bound:
            assert await place(s, p), p["metadata"]["name"]
            bound.add(p["metadata"]["uid"])
    check_lanes(s, namespace_of)
    for gang, size in VICTIM_GANGS.items():
        g = s.core.gang(gang)
        assert g is not None, gang
        holders = {slot.pod_uid for slot in g.slots}
        assert len(g.slots) == size and all(h is not None and namespace_of[h] == VICTIM for h in holders)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, max_size=24), train_name=st.sampled_from(["train", "vision/train"]))
def test_no_pod_joins_squats_or_reads_a_gang_of_another_namespace(
    steps: list[tuple[str, Any]], train_name: str
) -> None:
    run(play(steps, train_name))


# --------------------------------------------------------------------------- the identity itself
namespaces = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
names = st.text(min_size=1, max_size=24)


@given(a=namespaces, b=namespaces, x=names, y=names)
def test_keys_of_two_namespaces_never_meet(a: str, b: str, x: str, y: str) -> None:
    ka, kb = gang_key(a, x), gang_key(b, y)
    assert split_key(ka)[0] == a and split_key(kb)[0] == b
    if a != b:
        assert ka != kb
    assert gang_key(a, ka) == ka  # a key read again in its namespace is the same gang
    assert split_key(gang_key(a, f"{a}/"))[0] == a


@given(ns=namespaces, pod_name=names, name=names)
def test_no_explicit_name_takes_a_one_pod_gang(ns: str, pod_name: str, name: str) -> None:
    own = one_pod_key(ns, pod_name)
    assert is_one_pod(own) and split_key(own)[0] == ns
    try:
        key = explicit_key(ns, name, "affinityGroup.name")
    except UserError as err:
        assert err.field == "affinityGroup.name"
        return
    assert key != own and not is_one_pod(key)


# ------------------------------------------------------------------------------- after a restart
def test_recovery_keeps_each_gang_in_its_namespace() -> None:
    """Bind info round-trips: gangs of two namespaces that wrote the same name come back as the
    same two gangs, from the spec or (a spec that no longer parses) from the bind info alone."""

    async def go() -> None:
        binder = MemoryBinder()
        s = scheduler(binder)
        mine = [
            pod(f"v{i}", f"train-{i}", VICTIM, group_spec("vision", 8, 2, "vision/train")) for i in range(2)
        ]
        theirs = pod("e0", "train-0", EVIL, group_spec("nlp", 8, 2, "vision/train"))
        for p in [*mine, theirs]:
            assert await place(s, p)
        api = bound_pods(s, binder, [*mine, theirs])
        for broken in (False, True):
            if broken:  # the specs no longer say: the bind info alone names the gangs
                for p in api:
                    p["metadata"]["annotations"]["topogang.io/pod-scheduling-spec"] = "{not yaml"
            fresh = Core(example().spec)
            report = recover(fresh, api, now=0.0)
            assert sorted(report.gangs) == ["evil/vision/train", "vision/train"], report.lines()
            g = fresh.gang("evil/vision/train")
            assert g is not None and {sl.pod_uid for sl in g.slots} == {"e0", None}
            g = fresh.gang("vision/train")
            assert g is not None and {sl.pod_uid for sl in g.slots} == {"v0", "v1"}
            assert violations(fresh) == []

    run(go())


@pytest.mark.parametrize("ns", ["", "vision/evil", "/"])
def test_a_namespace_that_could_spell_another_namespaces_keys_is_refused(ns: str) -> None:
    with pytest.raises(UserError) as err:
        gang_key(ns, "train")
    assert err.value.field == "metadata.namespace"
    with pytest.raises(UserError):
        one_pod_key(ns, "solo")
    s = scheduler()
    assert s.gang_ledger.resolve(s.core, ns, "train", None) is None
