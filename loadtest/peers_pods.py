"""The pods of a bench-peers job, as a user of each arm's system writes them.

- **topogang**: `schedulerName: topogang`, the opt-in limit and the spec annotation (VC, priority 0
  when guaranteed, -1 when opportunistic, an affinity group for gangs, and `promoteWhenQuota` on
  every job, as the simulator's topogang asks: an opportunistic job is promoted when its VC has room,
  a guaranteed one may start as a guest instead of ending running work, `topology/room.py`);
- **kueue**: the LocalQueue label; a gang is a pod group (`pod-group-name` label, `pod-group-total-count`
  annotation) whose pods prefer one rack (`podset-preferred-topology`), as a user of Topology Aware
  Scheduling asks for a multi-node job that runs best in a rack but may run across racks; placed by
  the stock kube-scheduler once Kueue admits it;
- **stock**: GPU requests only, the stock kube-scheduler's profile.

Every pod requests `nvidia.com/gpu` only (Kueue's ClusterQueues cover that resource alone) and ends
at once when deleted (`terminationGracePeriodSeconds: 0`).
"""

from __future__ import annotations

from typing import Any

import orjson

from loadtest.peers_cluster import GPU, LOCAL_QUEUE, RACK_LABEL, namespace_of
from loadtest.simulate.trace import Job

RUN_LABEL = "bench.topogang.io/run"
JOB_LABEL = "bench.topogang.io/job"
SPEC = "topogang.io/pod-scheduling-spec"
ENABLE = "topogang.io/pod-scheduling-enable"
ISOLATION = "topogang.io/pod-leaf-cell-isolation"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
ARMS = ("topogang", "kueue", "stock")
SCHEDULER = {"topogang": "topogang", "kueue": "stock", "stock": "stock"}


def attempt_name(job: Job, attempt: int) -> str:
    return f"j{job.id}-a{attempt}"


def pods_for(arm: str, run: str, job: Job, attempt: int, guaranteed: bool) -> list[dict[str, Any]]:
    """The pods of one attempt of `job`, as a user of `arm` would write them."""
    name = attempt_name(job, attempt)
    ns = namespace_of(job.vc)
    out = []
    for i, gpus in enumerate(job.pods):
        labels = {RUN_LABEL: run, JOB_LABEL: str(job.id)}
        annotations: dict[str, str] = {}
        limits: dict[str, str] = {GPU: str(gpus)}
        if arm == "topogang":
            spec: dict[str, Any] = {
                "virtualCluster": job.vc,
                "priority": 0 if guaranteed else -1,
                "leafCellNumber": gpus,
            }
            spec["promoteWhenQuota"] = True
            if len(job.pods) > 1:
                spec["affinityGroup"] = {
                    "name": f"{ns}/{name}",
                    "members": [{"podNumber": len(job.pods), "leafCellNumber": gpus}],
                }
            annotations[SPEC] = orjson.dumps(spec).decode()
            limits[ENABLE] = "1"
        elif arm == "kueue":
            labels[KUEUE_QUEUE] = LOCAL_QUEUE
            if len(job.pods) > 1:
                labels[KUEUE_GROUP] = name
                annotations[KUEUE_COUNT] = str(len(job.pods))
                annotations[KUEUE_PREFERRED] = RACK_LABEL
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": ns,
                    "labels": labels,
                    "annotations": annotations,
                },
                "spec": {
                    "schedulerName": SCHEDULER[arm],
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "fake.invalid/train:1",
                            "resources": {"requests": {GPU: str(gpus)}, "limits": limits},
                        }
                    ],
                },
            }
        )
    return out
