"""`make bench-peers` without a cluster: the slice it cuts, the cluster each system is told about,
the pods each arm submits, Kueue's webhook configurations, and the replay's bookkeeping fed with
the events a pod watch would deliver (binds, completions, a preemption)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from config.load import load_config
from loadtest.kube_report import wait_reasons
from loadtest.kueue_plane import webhook_configurations
from loadtest.peers_arm import ArmRun
from loadtest.peers_cluster import COMPLETE_AT, RACK_LABEL, kueue_objects, namespace_of, topology_config
from loadtest.peers_jobs import JobState, gang_log
from loadtest.peers_pods import KUEUE_GROUP, KUEUE_PREFERRED, SPEC, pods_for
from loadtest.peers_report import _attempts, _by_component, _reasons
from loadtest.peers_slice import cut_slice
from loadtest.simulate.cluster import shared_cluster
from loadtest.simulate.engine import JobRecord
from loadtest.simulate.slowdown import make_slowdown
from loadtest.simulate.trace import Job
from topology.core import Core

TRACE = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-23 00:00:00,36000,8,0,6214e9
2017-10-23 00:30:00,600,1,0,6214e9
2017-10-23 01:00:00,7200,16,0,b436b2
2017-10-23 02:10:00,60,2,0,ee9e8c
2017-10-23 03:00:00,100,1,0,6214e9
2017-10-23 04:00:00,100,1,nope-vc-is-ignored-by-none,unknownvc
"""


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(TRACE.replace("nope-vc-is-ignored-by-none", "0"))
    return p


def test_slice_warm_starts_the_jobs_running_at_its_start(trace: Path) -> None:
    sl = cut_slice(trace, shared_cluster(), start_hours=2, hours=1.5, factor=60, drain_hours=1)
    # running at 02:00: the 8-GPU job (10 h from 00:00) and the 16-GPU gang (2 h from 01:00);
    # the 600 s job is over
    warm = sorted((j for j in sl.jobs if j.id in sl.warm), key=lambda j: j.id)
    assert [(j.vc, j.gpus, j.submit, j.duration) for j in warm] == [
        ("6214e9", 8, 0.0, 8 * 3600.0),
        ("b436b2", 16, 0.0, 3600.0),
    ]
    assert warm[1].pods == (8, 8)
    # inside [02:00, 03:30): 02:10 and 03:00; the unknown VC's job (04:00) is outside anyway
    assert [(j.vc, j.submit) for j in sl.measured()] == [("ee9e8c", 600.0), ("6214e9", 3600.0)]
    assert sl.horizon == 2.5 * 3600 and sl.real_seconds(3600) == 60


def test_slice_drops_what_no_policy_could_run(trace: Path) -> None:
    sl = cut_slice(trace, shared_cluster(), start_hours=3.5, hours=1, factor=60)
    assert sl.dropped == {"VC without quota": 1}
    assert sl.measured() == []


def test_topology_config_is_the_simulators_cluster(tmp_path: Path) -> None:
    cluster = shared_cluster()
    p = tmp_path / "c.yaml"
    p.write_text(topology_config(cluster))
    loaded = load_config(p)
    core = Core(loaded.spec)
    assert tuple(core.node_names()) == cluster.node_names
    assert {v: core.vc_quota(v) for v in core.vc_names()} == {vc: 8 * n for vc, n in cluster.quotas.items()}
    assert loaded.extras.namespace_virtual_clusters[namespace_of("6214e9")] == "6214e9"


def test_kueue_gets_one_cluster_queue_per_vc_in_one_cohort_with_tas() -> None:
    cluster = shared_cluster(nodes=16)
    objs = kueue_objects(cluster)
    kinds = [o["kind"] for _, o in objs]
    assert kinds[:2] == ["Topology", "ResourceFlavor"]
    topo, flavor = objs[0][1], objs[1][1]
    assert [lv["nodeLabel"] for lv in topo["spec"]["levels"]] == [RACK_LABEL, "kubernetes.io/hostname"]
    assert flavor["spec"]["topologyName"] == topo["metadata"]["name"]
    cqs = {o["metadata"]["name"]: o["spec"] for _, o in objs if o["kind"] == "ClusterQueue"}
    with_quota = {vc: n for vc, n in cluster.quotas.items() if n > 0}
    assert len(with_quota) < len(cluster.quotas)  # 16 nodes leave some VCs without quota: no queue for them
    assert set(cqs) == {f"cq-{vc}" for vc in with_quota}
    for vc, n in with_quota.items():
        spec = cqs[f"cq-{vc}"]
        assert spec["cohortName"] == "philly"
        assert spec["resourceGroups"][0]["flavors"][0]["resources"] == [
            {"name": "nvidia.com/gpu", "nominalQuota": 8 * n}
        ]
        assert spec["preemption"]["reclaimWithinCohort"] == "Any"
    lqs = [(p, o) for p, o in objs if o["kind"] == "LocalQueue"]
    assert {o["metadata"]["namespace"] for _, o in lqs} == {namespace_of(vc) for vc in with_quota}
    assert all(p.endswith(f"/namespaces/{o['metadata']['namespace']}/localqueues") for p, o in lqs)


def test_each_arm_submits_pods_as_its_users_write_them() -> None:
    gang = Job(7, "6214e9", 0.0, 60.0, 16, (8, 8))
    topo = pods_for("topogang", "r1", gang, 2, guaranteed=False)
    assert [p["metadata"]["name"] for p in topo] == ["j7-a2-0", "j7-a2-1"]
    spec = orjson.loads(topo[0]["metadata"]["annotations"][SPEC])
    assert spec["priority"] == -1 and spec["promoteWhenQuota"] is True
    guaranteed = orjson.loads(
        pods_for("topogang", "r1", gang, 2, guaranteed=True)[0]["metadata"]["annotations"][SPEC]
    )
    assert guaranteed["priority"] == 0 and guaranteed["promoteWhenQuota"] is True  # as the simulator asks
    assert spec["affinityGroup"] == {
        "name": "vc-6214e9/j7-a2",
        "members": [{"podNumber": 2, "leafCellNumber": 8}],
    }
    assert topo[0]["spec"]["schedulerName"] == "topogang"
    assert (
        orjson.loads(
            pods_for("topogang", "r1", gang, 0, guaranteed=True)[0]["metadata"]["annotations"][SPEC]
        )["priority"]
        == 0
    )
    kq = pods_for("kueue", "r1", gang, 0, guaranteed=True)
    assert {p["metadata"]["labels"][KUEUE_GROUP] for p in kq} == {"j7-a0"}
    assert all(p["metadata"]["annotations"][KUEUE_PREFERRED] == RACK_LABEL for p in kq)
    assert kq[0]["spec"]["schedulerName"] == "stock"
    single = pods_for("kueue", "r1", Job(8, "6214e9", 0.0, 60.0, 2, (2,)), 0, guaranteed=True)
    assert KUEUE_GROUP not in single[0]["metadata"]["labels"]
    stock = pods_for("stock", "r1", gang, 0, guaranteed=True)
    assert stock[0]["metadata"]["annotations"] == {}
    assert stock[0]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}


MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
- name: mclusterqueue.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-clusterqueue}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate--v1-pod}}
"""


def test_kueue_webhooks_point_at_the_local_process_with_its_ca() -> None:
    docs = webhook_configurations(MANIFESTS, "https://127.0.0.1:9443", b"CA PEM")
    assert [d["kind"] for d in docs] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    mutating = {h["name"]: h for h in docs[0]["webhooks"]}
    assert set(mutating) == {"mpod.kb.io", "mclusterqueue.kb.io"}  # the Job integration is off
    pod = mutating["mpod.kb.io"]
    assert pod["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate--v1-pod",
        "caBundle": base64.b64encode(b"CA PEM").decode(),
    }
    skipped = pod["namespaceSelector"]["matchExpressions"][0]
    assert skipped["operator"] == "NotIn" and set(skipped["values"]) == {"kube-system", "kueue-system"}
    assert "namespaceSelector" not in mutating["mclusterqueue.kb.io"]
    assert docs[1]["webhooks"][0]["clientConfig"]["url"].endswith("/validate--v1-pod")
    assert yaml.safe_dump(docs)  # plain data, ready to POST


class Recorder(ArmRun):
    """The replay's bookkeeping with the API writes recorded instead of sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[str, str]] = []
        self.patches: dict[str, dict[str, str]] = {}

    def _write(self, method: str, path: str, body: object, what: str) -> None:
        self.writes.append((method, path))

    def _patch_pod(self, ns: str, name: str, annotations: dict[str, str]) -> None:
        self.patches[name] = annotations


def pod_event(name: str, node: str | None = None, phase: str = "Pending", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "spec": {"nodeName": node}, "status": {"phase": phase}}


def test_replay_records_start_stretch_preemption_and_end(trace: Path) -> None:
    cluster = shared_cluster()
    sl = cut_slice(trace, cluster, start_hours=2, hours=1.5, factor=60, drain_hours=1)
    run = Recorder(
        "stock", sl, cluster, make_slowdown("published"), {"API_PORT": "1"}, "r", say=lambda _: None
    )
    gang = next(j for j in sl.jobs if j.gpus == 16)
    st = JobState(gang, JobRecord(gang, queued_at=0.0))
    run.jobs[gang.id] = st
    run.t0 = 1000.0
    run._submit(st, 1000.0)
    assert [m for m, _ in run.writes] == ["POST", "POST"]
    # the gang's two pods bind 10 s apart, in two racks: spread "racks" = 2.0 / 1.5 (rack) slower
    run._handle("MODIFIED", pod_event("j1-a0-0", "r01-n1"), 1005.0)
    assert st.record.start is None
    run._handle("MODIFIED", pod_event("j1-a0-1", "r02-n1"), 1010.0)
    assert st.record.start == pytest.approx(600.0)  # 10 real s x 60
    assert st.record.run_seconds == pytest.approx(3600.0 * 2.0 / 1.5)
    assert st.record.end == pytest.approx(600.0 + 4800.0)
    assert set(run.patches) == {"j1-a0-0", "j1-a0-1"} and COMPLETE_AT in run.patches["j1-a0-0"]
    assert run.used[0] == 8 and run.used[8] == 8
    # someone else deletes a member: a preemption; the attempt is dropped and the job submitted again
    run.writes.clear()
    run._handle("DELETED", pod_event("j1-a0-0", "r01-n1"), 1020.0)
    assert st.record.preempted == 1 and st.record.start is None
    assert st.record.lost_gpu_seconds == pytest.approx(10 * 60 * 16)
    assert ("DELETE", "/api/v1/namespaces/vc-b436b2/pods/j1-a0-1") in run.writes
    assert [p for m, p in run.writes if m == "POST"] == ["/api/v1/namespaces/vc-b436b2/pods"] * 2
    assert run.used[0] == 0 and run.used[8] == 0 and run.preemptions == 1
    # the new attempt binds in one rack and both pods succeed: the job is done, its GPUs free
    run._handle("MODIFIED", pod_event("j1-a1-0", "r03-n1"), 1030.0)
    run._handle("MODIFIED", pod_event("j1-a1-1", "r03-n2"), 1030.0)
    assert st.record.run_seconds == pytest.approx(3600.0)
    run._handle("MODIFIED", pod_event("j1-a1-0", "r03-n1", "Succeeded"), 1091.0)
    run._handle("MODIFIED", pod_event("j1-a1-1", "r03-n2", "Succeeded"), 1091.0)
    assert st.finished and run.used[16] == 0 and run.used[17] == 0
    assert len(run.kwok_lag) == 2 and run.kwok_lag[0] == pytest.approx(1.0)


def test_replay_gives_device_plugin_gpus_and_reads_topogangs(trace: Path) -> None:
    cluster = shared_cluster()
    sl = cut_slice(trace, cluster, start_hours=2, hours=1.5, factor=60, drain_hours=1)
    two = next(j for j in sl.jobs if j.gpus == 2)
    cases: tuple[tuple[str, dict[str, Any], tuple[int, ...]], ...] = (
        ("stock", {}, (0, 1)),
        ("topogang", {"annotations": {"topogang.io/pod-leaf-cell-isolation": "4,5"}}, (4, 5)),
    )
    for arm, meta, want in cases:
        run = Recorder(
            arm, sl, cluster, make_slowdown("published"), {"API_PORT": "1"}, "r", say=lambda _: None
        )
        st = JobState(two, JobRecord(two, queued_at=0.0))
        run.jobs[two.id] = st
        run._submit(st, run.t0)
        run._handle("MODIFIED", pod_event(f"j{two.id}-a0-0", "r01-n1", **meta), run.t0 + 1)
        assert st.record.placement is not None
        assert st.record.placement.pods == ((0, want),)
        assert st.record.run_seconds == pytest.approx(two.duration)  # one half: as traced


def bind_info(node: str, nodes: tuple[str, ...], cell_type: str) -> str:
    """A gang's `pod-bind-info` as topogang writes it: this pod's node, every slot's node and its
    GPUs' quota cell type ("" when opportunistic)."""
    gpus = list(range(8))
    return yaml.safe_dump(
        {
            "node": node,
            "leafCellIsolation": list(gpus),
            "cellChain": "RACK",
            "affinityGroupBindInfo": [
                {
                    "podPlacements": [
                        {
                            "physicalNode": n,
                            "physicalLeafCellIndices": list(gpus),
                            "preassignedCellTypes": [cell_type] * 8,
                            "slot": i,
                        }
                        for i, n in enumerate(nodes)
                    ]
                }
            ],
        }
    )


def test_gang_log_shows_each_attempt_its_fate_and_where_its_pods_went(trace: Path) -> None:
    cluster = shared_cluster()
    sl = cut_slice(trace, cluster, start_hours=2, hours=1.5, factor=60, drain_hours=1)
    run = Recorder(
        "topogang", sl, cluster, make_slowdown("published"), {"API_PORT": "1"}, "r", say=lambda _: None
    )
    gang = next(j for j in sl.jobs if j.gpus == 16)
    one = next(j for j in sl.jobs if j.gpus == 1)
    for job in (gang, one):
        st = JobState(job, JobRecord(job, queued_at=0.0))
        run.jobs[job.id] = st
        run._submit(st, run.t0)
    st = run.jobs[gang.id]
    pods = [f"j{gang.id}-a0-{i}" for i in range(2)]
    planned = ("r01-n1", "r02-n1")
    for pod, node in zip(pods, planned, strict=True):
        ann = {
            "topogang.io/pod-leaf-cell-isolation": "0,1,2,3,4,5,6,7",
            "topogang.io/pod-bind-info": bind_info(node, planned, "RACK.NODE"),
        }
        run._handle("MODIFIED", pod_event(pod, node, annotations=ann), run.t0 + 1)
    run._handle("DELETED", pod_event(pods[0], "r01-n1"), run.t0 + 2)  # preempted
    assert len(st.attempts) == 2
    log = gang_log(run.jobs, cluster, sl.warm, run.trace_now)
    assert [g["job"] for g in log] == [gang.id]  # multi-node gangs only
    first, second = log[0]["attempts"]
    assert first["ended"] == "preempted" and first["guaranteed"] is True
    assert first["racks"] == ["rack-01", "rack-02"] and first["one_rack"] is False
    assert [(p["node"], p["rack"], p["on_quota"]) for p in first["pods"]] == [
        ("r01-n1", "rack-01", True),
        ("r02-n1", "rack-02", True),
    ]
    assert first["planned"] == list(planned) and first["started_h"] is not None
    assert second["ended"] == "waiting" and second["pods"] == [] and second["one_rack"] is False


def refused_event(name: str) -> dict[str, Any]:
    """An unbound pod as kube-scheduler leaves it after topogang's filter refused it for quota."""
    msg = f"0/80 nodes are available: 80 topogang: gang vc-x/pod:{name} waits [InsufficientQuota]: ..."
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
    return {"metadata": {"name": name}, "spec": {}, "status": {"phase": "Pending", "conditions": [cond]}}


def test_topogang_users_tally_follows_promotions_and_quota_refusals(trace: Path) -> None:
    """The harness's user submits guaranteed only within its VC's quota as the extender counts it:
    a promoted opportunistic job holds quota, and a guaranteed job refused quota all the same goes
    opportunistic at once, not guaranteed again before its VC's tally falls."""
    cluster = shared_cluster()
    sl = cut_slice(trace, cluster, start_hours=2, hours=1.5, factor=60, drain_hours=1)
    run = Recorder(
        "topogang", sl, cluster, make_slowdown("published"), {"API_PORT": "1"}, "r", say=lambda _: None
    )
    one = next(j for j in sl.jobs if j.gpus == 1)
    vc, quota = one.vc, cluster.quota_gpus(one.vc)
    run.guaranteed_gpus[vc] = quota  # the VC's quota is all held: the next job goes opportunistic
    st = JobState(one, JobRecord(one, queued_at=0.0))
    run.jobs[one.id] = st
    run._submit(st, run.t0)
    assert not st.current.guaranteed and not st.current.counted
    # it runs as a guest; once the extender promotes it (bind info on quota cells) it holds quota
    pod = f"j{one.id}-a0-0"
    run._handle("MODIFIED", pod_event(pod, "r01-n1"), run.t0 + 1)
    assert run.guaranteed_gpus[vc] == quota
    on_cells = {"topogang.io/pod-bind-info": bind_info("r01-n1", ("r01-n1",), "RACK.NODE")}
    run._handle("MODIFIED", pod_event(pod, "r01-n1", annotations=on_cells), run.t0 + 2)
    run._handle("MODIFIED", pod_event(pod, "r01-n1", annotations=on_cells), run.t0 + 3)  # counted once
    assert st.current.counted and run.guaranteed_gpus[vc] == quota + 1
    run._handle("MODIFIED", pod_event(pod, "r01-n1", "Succeeded", annotations=on_cells), run.t0 + 4)
    assert run.guaranteed_gpus[vc] == quota and not st.current.counted
    # a guaranteed job the extender refuses for quota (a promotion the tally has not seen) is
    # re-submitted opportunistic at once and not promoted back until the VC's tally falls again
    two = next(j for j in sl.jobs if j.gpus == 2)
    vc, quota = two.vc, cluster.quota_gpus(two.vc)
    run.guaranteed_gpus[vc] = quota - 2
    st2 = JobState(two, JobRecord(two, queued_at=0.0))
    run.jobs[two.id] = st2
    run._submit(st2, run.t0 + 5)
    assert st2.current.guaranteed and run.guaranteed_gpus[vc] == quota
    run.writes.clear()
    run._handle("MODIFIED", pod_event(f"j{two.id}-a0-0"), run.t0 + 6)  # pending, no word yet
    assert len(st2.attempts) == 1
    run._handle("MODIFIED", refused_event(f"j{two.id}-a0-0"), run.t0 + 7)
    assert [a.ended for a in st2.attempts] == ["refused quota", ""]
    assert not st2.current.guaranteed and run.refused == 1 and run.guaranteed_gpus[vc] == quota - 2
    assert ("DELETE", f"/api/v1/namespaces/{namespace_of(vc)}/pods/j{two.id}-a0-0") in run.writes
    run._promote_waiting(run.t0 + 8)
    assert len(st2.attempts) == 2  # quota by the tally, but no release since the refusal
    run.vc_releases[vc] += 1  # a guaranteed job of the VC ended
    run._promote_waiting(run.t0 + 9)
    assert len(st2.attempts) == 3 and st2.current.guaranteed and run.resubmitted == 1


def test_report_names_each_components_cpu_and_the_schedulers_attempts() -> None:
    """The split and the attempts say whose CPU an arm's total is; an arm or an older run's JSON
    without them shows `-`, not a made-up zero."""
    parts = {"kube-scheduler": 58.04, "extender": 43.53}
    assert _by_component(parts) == "kube-scheduler 58.0, extender 43.5"
    assert _by_component(None) == _by_component({}) == "-"
    metrics = {"attempts scheduled": 793.0, "attempts unschedulable": 19222.0, "algorithm count": 20017.0}
    assert _attempts(metrics) == "793 / 19222"
    assert _attempts(None) == "-"


def test_failed_attempts_are_read_back_by_the_extenders_wait() -> None:
    """kube-scheduler's log says which wait each failed attempt met; its metrics only count them."""
    head = 'I1127 07:18:43.979745 2845 schedule_one.go:1194] "Unable to schedule pod; no fit; waiting" pod='
    lines = [
        head + '"vc-a/j1-a0-0" err="0/80 nodes are available: 1 topogang: gang vc-a/pod:j1-a0-0 waits '
        "[Queued]: gang vc-a/pod:j0-a0-0 of VC a is older, 79 topogang: gang vc-a/pod:j1-a0-0 waits "
        '[Queued] (reason on one node)."',
        head + '"vc-a/j0-a0-0" err="0/80 nodes are available: 80 topogang: gang vc-a/pod:j0-a0-0 waits '
        "[InsufficientQuota]: VC a has 0 of its quota's leaf cells free\"",
        head + '"vc-b/j2-a0-0" err="0/80 nodes are available: 1 topogang: gang vc-b/pod:j2-a0-0 waits '
        '[Queued]: ..."',
        head + '"vc-b/j3-a0-0" err="0/80 nodes are available: 80 Insufficient nvidia.com/gpu."',
        'I1127 07:18:44.004363 2845 preemption.go:136] "No preemption candidate is found" pod="vc-a/j1-a0-0"',
    ]
    counts = wait_reasons(lines)
    assert counts == {"Queued": 2, "InsufficientQuota": 1, "other": 1}
    assert list(counts) == ["Queued", "InsufficientQuota", "other"]  # the most first
    assert _reasons(counts) == "Queued 2, InsufficientQuota 1, other 1"
    assert _reasons(None) == _reasons({}) == "-"
