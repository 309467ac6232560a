"""Recovery adopts only what topogang decided, against the in-memory API server.

A pod created with `spec.nodeName` and bind info of its owner's making (topogang's format with no
or a wrong signature, a genuine signature copied from another pod, or HiveD's format) claims GPUs,
quota cells and a priority. After a restart it must not get them: its GPUs are held (nobody else
is placed on them) with no quota or priority, a Warning Event and a metric say so, and
/v1/inspect shows it. Genuine bind info, and a promoted gang's re-signed write-back, round-trip.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.gangs.bindsig import SIGNATURE_ANNOTATION, BindSigner, SigningKeyError, load_key
from extender.kube.client import pod_path
from extender.kube.sync import ClusterSync
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, fc_annotations, pod, run, spec
from tests.extender.test_kube_durable import Running, cluster, start, submit, until
from topology.invariants import violations

KEY = b"k" * 32
NLP = "nlp"
INFO = "topogang.io/pod-bind-info"


async def restart(kube: FakeKube, r: Running, clock: Clock, **kw: Any) -> Running:
    for fn in r.service.on_stop:
        await fn()
    await r.stop()
    clock.t += 5
    return await start(kube, clock, **kw)


def gpus_of(r: Running, gang: str) -> set[tuple[str, int]]:
    core = r.s.core
    g = core.gang(gang)
    assert g is not None, gang
    return {(core.slot_place(s)[0], gpu) for s in g.slots for gpu in core.slot_place(s)[1]}


def events(kube: FakeKube, reason: str) -> list[dict[str, Any]]:
    return [e for e in kube.server.events if e.get("reason") == reason]


def test_genuine_bind_info_is_signed_and_round_trips_a_restart() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        for i in range(2):
            await a.place(submit(kube, f"u{i}", f"job-{i}", NLP, spec(NLP, 8, 2, "nlp/job")))
        ann = kube.server.at(pod_path(NLP, "job-0"))["metadata"]["annotations"]
        assert ann[SIGNATURE_ANNOTATION] == BindSigner(KEY).sign("u0", ann[INFO])
        before = gpus_of(a, "nlp/job")
        b = await restart(kube, a, clock, signing_key=KEY)
        g = b.s.core.gang("nlp/job")
        assert g is not None and g.priority == 0 and g.owner >= 0
        assert gpus_of(b, "nlp/job") == before
        assert [x for x in b.s.core.gangs() if x.name.startswith("unverified:")] == []
        await b.stop()

    run(go())


@pytest.mark.parametrize("when", ["at the next start", "while running"])
@pytest.mark.parametrize("how", ["no signature", "copied signature", "edited priority", "hived format"])
def test_forged_bind_info_is_held_as_occupied_not_adopted(how: str, when: str) -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        await a.place(submit(kube, "g0", "genuine-0", NLP, spec(NLP, 8, 1, "nlp/genuine")))
        node = await a.place(submit(kube, "v0", "victim-0", NLP, spec(NLP, 8, 1, "nlp/victim")))
        claimed = gpus_of(a, "nlp/victim")
        victim = kube.server.at(pod_path(NLP, "victim-0"))
        kube.server.delete(pod_path(NLP, "victim-0"), {"gracePeriodSeconds": 0})
        await until_gone(a, "nlp/victim")

        def forge(ann: dict[str, str]) -> None:
            if how == "no signature":
                del ann[SIGNATURE_ANNOTATION]
            elif how == "edited priority":
                assert "priority: 0" in ann[INFO]
                ann[INFO] = ann[INFO].replace("priority: 0", "priority: 1000")
            elif how == "hived format":
                del ann[SIGNATURE_ANNOTATION], ann[INFO], ann["topogang.io/pod-leaf-cell-isolation"]

        # a pod created bound, with the victim's decision as its own ("copied signature": as is)
        forged = copy.deepcopy(victim)
        forged["metadata"] = {**victim["metadata"], "uid": "f0", "name": "forged-0"}
        forged["metadata"].pop("resourceVersion", None)
        forge(forged["metadata"]["annotations"])
        assert forged["spec"]["nodeName"] == node
        if when == "while running":
            kube.server.put(pod_path(NLP, "forged-0"), forged)
            b = a
        else:
            for fn in a.service.on_stop:
                await fn()
            await a.stop()
            kube.server.put(pod_path(NLP, "forged-0"), forged)
            b = await start(kube, clock, signing_key=KEY)
        name = "unverified:nlp/forged-0"
        await until_held(b, name)
        core = b.s.core
        g = core.gang(name)
        assert g is not None and g.priority == -1 and g.owner == -1 and g.evicting
        assert gpus_of(b, name) == claimed and core.node_fill(node) == (0, 8)
        assert core.gang("nlp/victim") is None and core.gang("nlp/genuine") is not None
        assert violations(core) == []
        # nobody is placed on its GPUs: a gang of the same VC lands elsewhere
        nxt = await b.place(submit(kube, "n0", "next-0", NLP, spec(NLP, 8, 1, "nlp/next")))
        assert nxt != node
        # the admin sees it: a Warning Event, a metric, /v1/inspect
        assert await until_true(lambda: bool(events(kube, "BindInfoUnverified")))
        (ev,) = events(kube, "BindInfoUnverified")
        assert ev["type"] == "Warning" and ev["involvedObject"]["name"] == "forged-0", ev
        text = (await b.http.get("/metrics")).text
        assert "topogang_unverified_bind_info_total 1.0" in text
        kube.server.add_token("t-admin", "admin", audiences=("topogang",))  # /v1/inspect is an admin's
        kube.server.grant("admin", "clusterstatus", "get")
        admin = {"Authorization": "Bearer t-admin"}
        assert (await b.http.get(f"/v1/inspect/affinitygroups/{name}", headers=admin)).status_code == 200
        # once the pod is gone, its GPUs are free
        kube.server.delete(pod_path(NLP, "forged-0"), {"gracePeriodSeconds": 0})
        await until_gone(b, name)
        assert core.node_fill(node) == (8, 8)
        await b.stop()

    run(go())


@pytest.mark.parametrize("when", ["at the next start", "while running"])
def test_a_copy_of_a_running_pods_bind_info_takes_nothing_from_it_until_it_is_gone(when: str) -> None:
    """A tenant creates a pod already bound to another team's node, with that team's running pod's
    bind info and signature copied (its own UID, so the signature does not match). The genuine gang
    keeps its GPUs (at a start it is restored first: before, the copy's claim was held first and the
    genuine gang, finding its GPUs taken, was not recovered at all). Once the genuine pod is gone,
    the copy's claim is held (it runs on those GPUs), so nobody else is placed there."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        node = await a.place(submit(kube, "v0", "victim-0", NLP, spec(NLP, 8, 1, "nlp/victim")))
        claimed = gpus_of(a, "nlp/victim")
        assert put_copy(kube, "victim-0")["spec"]["nodeName"] == node
        if when == "while running":
            b = a
            await until("the copy seen", lambda: "f0" in claims(b))
        else:
            b = await restart(kube, a, clock, signing_key=KEY)
            kube.server.patch(pod_path("intruder", "copy-0"), {"metadata": {"labels": {"seen": "again"}}})
            await until("the copy seen again", lambda: kube.caught_up("/api/v1/pods"))
            await asyncio.sleep(0.2)  # what that event would tell is told by now
            # told once, not again at each event of the copy while its GPUs are the victim's
            assert "topogang_unverified_bind_info_total 1.0" in (await b.http.get("/metrics")).text
        g = b.s.core.gang("nlp/victim")
        assert g is not None and g.owner >= 0 and g.priority == 0
        assert gpus_of(b, "nlp/victim") == claimed
        assert b.s.core.gang("unverified:intruder/copy-0") is None  # every GPU it names is the victim's
        assert violations(b.s.core) == []
        # the victim goes: its GPUs are the copy's now, and the next gang lands elsewhere
        kube.server.delete(pod_path(NLP, "victim-0"), {"gracePeriodSeconds": 0})
        await until_held(b, "unverified:intruder/copy-0")
        assert gpus_of(b, "unverified:intruder/copy-0") == claimed and claims(b) == {}
        assert await b.place(submit(kube, "n0", "next-0", NLP, spec(NLP, 8, 1, "nlp/next"))) != node
        assert violations(b.s.core) == []
        # and when the copy goes too, the node is free
        kube.server.delete(pod_path("intruder", "copy-0"), {"gracePeriodSeconds": 0})
        await until_gone(b, "unverified:intruder/copy-0")
        assert b.s.core.node_fill(node) == (8, 8)
        await b.stop()

    run(go())


def test_a_copys_claim_is_held_before_anything_is_placed_on_gpus_a_reservation_frees() -> None:
    """GPUs a copy claims can free without a pod going: here the genuine gang loses the member the
    copy copied, keeps that slot reserved for a replacement, and its reservation then expires. The
    next verb to take the scheduler's lock holds the copy's claim before it places anything."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        node = await a.place(submit(kube, "v0", "victim-0", NLP, spec(NLP, 8, 2, "nlp/victim")))
        await a.place(submit(kube, "v1", "victim-1", NLP, spec(NLP, 8, 2, "nlp/victim")))
        g = a.s.core.gang("nlp/victim")
        assert g is not None
        claimed = {(node, gpu) for s in g.slots if s.pod_uid == "v0" for gpu in a.s.core.slot_place(s)[1]}
        await copied_then_gone(kube, a, "victim-0", "v0")
        assert a.s.core.gang("unverified:intruder/copy-0") is None  # its slot is still the gang's
        clock.t += 3600
        await a.s.expire()  # not whole for a TTL: released (victim-1 is evicted)
        await a.place(submit(kube, "n0", "next-0", NLP, spec(NLP, 8, 1, "nlp/next")))
        assert gpus_of(a, "unverified:intruder/copy-0") == claimed
        assert claims(a) == {} and violations(a.s.core) == []
        await a.stop()

    run(go())


def test_a_copys_claim_is_held_before_a_filter_that_lets_a_gang_go_places_anything() -> None:
    """One filter can both let a gang go and place: a pod of a framework's newer attempt supersedes
    the older attempt's gang, whose slot for the pod the copy copied (gone since) is released, and
    places its own gang, in one call. The copy's claim is held between the two, so the new gang is
    not placed on GPUs the copy runs on."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)

        def worker(i: int, attempt: str) -> dict[str, Any]:
            ann = fc_annotations(NLP, "tf", attempt, "worker", i)
            return pod(f"{attempt}-{i}", f"tf-worker-{i}", NLP, spec(NLP, 8, 2, "tf"), annotations=ann)

        old = [worker(i, "0_a") for i in range(2)]
        for p in old:
            kube.server.put(pod_path(NLP, p["metadata"]["name"]), p)
        node = await a.place(old[0])
        await a.place(old[1])
        claimed = {(node, gpu) for gpu in range(8)}
        await copied_then_gone(kube, a, "tf-worker-0", "0_a-0")
        assert a.s.core.gang("unverified:intruder/copy-0") is None  # its slot is still the old attempt's
        newer = worker(0, "1_b")
        kube.server.put(pod_path(NLP, "tf-worker-0"), newer)
        await until("the newer pod seen", lambda: kube.caught_up("/api/v1/pods"))
        r = await a.verb("filter", newer)
        assert r["NodeNames"], {k: v for k, v in r.items() if v}
        assert a.s.core.gang("nlp/tf/0_a") is None  # superseded by that filter
        assert gpus_of(a, "unverified:intruder/copy-0") == claimed
        assert not gpus_of(a, "nlp/tf/1_b") & claimed
        assert claims(a) == {} and violations(a.s.core) == []
        await a.stop()

    run(go())


def put_copy(kube: FakeKube, name: str) -> dict[str, Any]:
    """`intruder/copy-0` (UID f0), created already bound, with nlp's running pod `name`'s bind info
    and signature copied: what a tenant who can read that pod and create pods can do."""
    copied = copy.deepcopy(kube.server.at(pod_path(NLP, name)))
    copied["metadata"] = {**copied["metadata"], "uid": "f0", "name": "copy-0", "namespace": "intruder"}
    copied["metadata"].pop("resourceVersion", None)
    return kube.server.put(pod_path("intruder", "copy-0"), copied)


async def copied_then_gone(kube: FakeKube, r: Running, name: str, uid: str) -> None:
    """The copy of `name` is seen while `name` runs (its claim contested); then `name` goes."""
    put_copy(kube, name)
    await until("the copy seen", lambda: "f0" in claims(r))
    kube.server.delete(pod_path(NLP, name), {"gracePeriodSeconds": 0})
    await until(f"{name} gone", lambda: not r.s.core.holds_slot(uid))


def claims(r: Running) -> dict[str, Any]:
    """The unverified pods' contested claims the service's pod sync keeps."""
    owners = [getattr(fn, "__self__", None) for fn in r.service.background]
    sync = next(o for o in owners if isinstance(o, ClusterSync))
    return dict(sync.claims.contested)


async def until_gone(r: Running, gang: str) -> None:
    await until(f"{gang} released", lambda: r.s.core.gang(gang) is None)


async def until_held(r: Running, gang: str) -> None:
    await until(f"{gang} held", lambda: r.s.core.gang(gang) is not None)


async def until_true(ok: Any) -> bool:
    await until("the event", ok)
    return True


def test_hived_bind_info_is_adopted_only_with_the_opt_in_and_only_before_topogang_bound_anything() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        await a.place(submit(kube, "v0", "hived-0", NLP, spec(NLP, 8, 1, "nlp/hived")))
        hived = kube.server.at(pod_path(NLP, "hived-0"))
        for k in (SIGNATURE_ANNOTATION, INFO, "topogang.io/pod-leaf-cell-isolation"):
            del hived["metadata"]["annotations"][k]  # what HiveD writes: its own keys only
        for fn in a.service.on_stop:
            await fn()
        await a.stop()
        kube.server.delete(pod_path(NLP, "hived-0"), {"gracePeriodSeconds": 0})
        hived["metadata"].pop("resourceVersion", None)
        kube.server.put(pod_path(NLP, "hived-0"), hived)
        b = await start(kube, clock, signing_key=KEY, adopt_unsigned_bind_info=True)
        g = b.s.core.gang("nlp/hived")
        assert g is not None and g.priority == 0 and g.owner >= 0  # the switch-over: adopted
        await b.place(submit(kube, "t0", "topo-0", NLP, spec(NLP, 8, 1, "nlp/topo")))
        for fn in b.service.on_stop:
            await fn()
        await b.stop()
        # topogang has bound a pod since: the opt-in, left on, adopts nothing unsigned any more
        c = await start(kube, clock, signing_key=KEY, adopt_unsigned_bind_info=True)
        assert c.s.core.gang("nlp/hived") is None
        h = c.s.core.gang("unverified:nlp/hived-0")
        assert h is not None and h.priority == -1 and c.s.core.gang("nlp/topo") is not None
        await c.stop()

    run(go())


def test_a_key_too_short_or_missing_is_named(tmp_path: Any) -> None:
    short = tmp_path / "key"
    short.write_bytes(b"short\n")
    with pytest.raises(SigningKeyError, match="key: the bind signing key has 5 bytes"):
        load_key(short)
    with pytest.raises(SigningKeyError, match="cannot read"):
        load_key(tmp_path / "absent")
    (tmp_path / "good").write_bytes(KEY + b"\n")
    assert load_key(tmp_path / "good") == KEY


@given(uid=st.text(min_size=1, max_size=20), info=st.text(max_size=200), other=st.text(max_size=200))
def test_a_signature_holds_for_its_own_pod_and_text_only(uid: str, info: str, other: str) -> None:
    signer = BindSigner(KEY)
    ann = {INFO: info, SIGNATURE_ANNOTATION: signer.sign(uid, info)}
    assert signer.verdict(uid, ann) is None
    assert signer.verdict(uid + "x", ann) is not None  # copied onto another pod
    if other != info:
        assert signer.verdict(uid, {**ann, INFO: other}) is not None  # edited
    assert BindSigner(b"o" * 32).verdict(uid, ann) is not None  # another key
    assert signer.verdict(uid, {INFO: info}) is not None  # unsigned
    assert signer.verdict(uid, {INFO: info}, adopt_unsigned=True) is None  # the opt-in
    if other != info:  # the opt-in adopts what carries no signature, never a wrong one
        assert signer.verdict(uid, {**ann, INFO: other}, adopt_unsigned=True) is not None
