"""What the filter tells a waiting pod about the pods its gang would preempt (`extender.http.answers`):
kube-scheduler copies those texts into the pod's FailedScheduling Event and PodScheduled condition,
which whoever reads the pod's namespace sees, so victims of another namespace are counted, never
named; the pod's own namespace's are named, as before."""

from __future__ import annotations

import json

from extender.http.answers import waiting_nodes
from tests.extender.helpers import args, place, pod, run, spec
from tests.extender.test_entitlement import config, make
from topology.decisions import Victim, Wait, WaitCode, WaitReason

# rival may preempt in VC vision: what it may not do is read vision's pods
RIVAL = "  defaultEntitlement: opportunistic\n  tenants:\n    rival: {virtualClusters: [vision]}\n"


def test_victims_are_named_to_their_own_namespace_and_counted_for_any_other() -> None:
    victims = (
        Victim("own-1", "vision/low", "n1"),
        Victim("secret-1", "nlp/train", "n1"),
        Victim("secret-2", "nlp/train", "n1"),
        Victim("secret-3", "nlp/train", "n2"),
        Victim("own-2", "vision/low", "n3"),
    )
    w = Wait(WaitReason(WaitCode.PREEMPTIBLE, "vision", "waits for its victims"), victims)
    failed, unresolvable = waiting_nodes(
        "vision/top", w, "the reason", ["n1", "n2", "n3", "n4"], {}, evicts_itself=False
    )
    said = {**failed, **unresolvable}
    assert "secret" not in json.dumps(said)
    assert said["n1"].startswith("topogang: node(n1) has preemptible pods: own-1 and 2 of other namespaces;")
    assert said["n2"].startswith("topogang: node(n2) has 1 preemptible pod of other namespaces;")
    assert said["n3"].startswith("topogang: node(n3) has preemptible pods: own-2;")
    assert "preemptible" not in said["n4"]
    assert set(failed) == {"n1", "n2", "n3"}  # where preemption helps, as before


def test_a_pod_of_another_namespace_is_not_told_its_victims_uids() -> None:
    async def go() -> None:
        s, _ = make(config(RIVAL))
        uids = []
        for i in range(6):  # vision's whole quota in use by its own gang
            p = pod(f"vision-uid-{i}", f"job-{i}", "vision", spec("vision", 8, 6, "train"))
            assert (await place(s, p))[1] is not None
            uids.append(p["metadata"]["uid"])
        r = await s.filter(args(pod("t0", "top-0", "rival", spec("vision", 8, 6, "grab", priority=900))))
        said = json.dumps(r)
        assert "[Preempting]" in said and "1 preemptible pod of other namespaces" in said, r
        assert not [u for u in uids if u in said], said

    run(go())


def test_a_pod_of_the_victims_own_namespace_is_told_their_uids() -> None:
    async def go() -> None:
        s, _ = make(config(RIVAL))
        for i in range(6):
            assert (await place(s, pod(f"low-{i}", f"job-{i}", "vision", spec("vision", 8, 6, "train"))))[1]
        r = await s.filter(args(pod("t0", "top-0", "vision", spec("vision", 8, 6, "grab", priority=900))))
        said = json.dumps(r)
        assert all(f"preemptible pods: low-{i}" in said for i in range(6)), r

    run(go())
