"""The load generators' jobs and fleet (locust users, bench's pre-fill), driving the extender
through `extender.kubesched`, the one imitation of kube-scheduler.

No locust here: a `Post` callable does the HTTP, so the same code drives the server from locust
users, from `loadtest.bench`'s pre-fill and from tests.

Jobs come from the Philly week's size mix (`loadtest.jobmix`): gangs of more than 8 GPUs are pods of
8; half the gangs are FrameworkController frameworks, half plain HiveD affinity groups. `Fleet` keeps the
cluster near a target fill by finishing (deleting) the oldest jobs before new ones arrive; it is also
kube-scheduler's view of the bound pods, for preemption's dry run.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender import kubesched
from loadtest.jobmix import draw_sizes, pods_for

SPEC = "topogang.io/pod-scheduling-spec"
ENABLE = "topogang.io/pod-scheduling-enable"
FINISH_PATH = "/v1/standalone/pods/{uid}"
URGENT_PRIORITY = 1000
MIXES = ("philly", "gang4x8")

# (verb, body) -> the decoded JSON reply, or None when the call failed (the caller reports failures)
Post = Callable[[str, bytes], Any]
Delete = Callable[[str], None]


# ---------------------------------------------------------------------------------------- cluster
@dataclass
class Cluster:
    """What a load generator needs to know about the server's cluster, read from the server."""

    nodes: list[str]
    vc_quota: dict[str, int]
    total_gpus: int
    used_gpus: int
    names_json: bytes = b""  # the NodeNames array, encoded once

    def __post_init__(self) -> None:
        self.names_json = orjson.dumps(self.nodes)


def cluster_from(summary: Mapping[str, Any], physical: object) -> Cluster:
    """`GET /v1/inspect` and `GET /v1/inspect/clusterstatus/physicalcluster` -> `Cluster`."""
    nodes = kubesched.node_names(physical)
    if not nodes:
        raise ValueError("the server's physical cluster has no nodes")
    gpus = summary.get("gpus") or {}
    total = int(gpus.get("total") or 8 * len(nodes))
    used = total - int(gpus.get("free", total))
    vcs = {str(k): int(v.get("quota", 0)) for k, v in (summary.get("virtualClusters") or {}).items()}
    return Cluster(nodes, vcs or {"default": total}, total, used)


# ---------------------------------------------------------------------------------------- jobs
@dataclass
class Job:
    name: str
    vc: str
    priority: int
    pods: list[int]
    run: str
    framework: bool = True  # a FrameworkController framework (tasks have slots), else a HiveD group
    uids: list[str] = field(default_factory=list)
    bound: dict[str, str] = field(default_factory=dict)  # uid -> node
    done: bool = False

    @property
    def gpus(self) -> int:
        return sum(self.pods)

    @property
    def gang(self) -> bool:
        return len(self.pods) > 1


class JobMix:
    """Jobs in the Philly week's size mix (or all 4 x 8-GPU gangs, the G1 shape), spread over the
    VCs by quota; 10% opportunistic, like `loadtest.bench_core`."""

    def __init__(self, cluster: Cluster, mix: str = "philly", seed: int | None = None) -> None:
        if mix not in MIXES:
            raise ValueError(f"unknown job mix {mix!r}; one of {', '.join(MIXES)}")
        self.mix = mix
        self.rng = random.Random(seed)
        self.vcs = sorted(cluster.vc_quota)
        self.weights = [max(1, cluster.vc_quota[v]) for v in self.vcs]
        self.run = uuid.uuid4().hex[:8]
        self.counter = itertools.count()

    def next(self, *, urgent: bool = False) -> Job:
        rng = self.rng
        vc = rng.choices(self.vcs, weights=self.weights)[0]
        n = next(self.counter)
        if urgent:
            return Job(f"urgent-{self.run}-{n}", vc, URGENT_PRIORITY, [8], self.run)
        gpus = 32 if self.mix == "gang4x8" else draw_sizes(rng, 1)[0]
        priority = -1 if self.mix == "philly" and rng.random() < 0.1 else 0
        # half the gangs are FrameworkController frameworks (each task has its own slot: filter
        # answers one node), half plain HiveD affinity groups (any open slot: prioritize ranks them)
        return Job(f"job-{self.run}-{n}", vc, priority, pods_for(gpus), self.run, framework=n % 2 == 0)


def pod_for(job: Job, index: int, uid: str) -> dict[str, Any]:
    """A realistic pending Pod (`extender-protocol.md` §8.1): FrameworkController identity for gang
    members, the scheduling spec, the opt-in limit, GPUs, tolerations."""
    gpus = job.pods[index]
    ns = job.vc
    name = f"{job.name}-{index}" if job.gang else job.name
    spec: dict[str, Any] = {"virtualCluster": job.vc, "priority": job.priority, "leafCellNumber": gpus}
    labels: dict[str, str] = {"app": job.name}
    annotations: dict[str, str] = {}
    owner: list[dict[str, Any]] = []
    if job.gang and not job.framework:
        spec["affinityGroup"] = {
            "name": f"{ns}/{job.name}",
            "members": [{"podNumber": len(job.pods), "leafCellNumber": gpus}],
        }
    elif job.gang:
        spec["affinityGroup"] = {
            "name": f"{ns}/{job.name}",
            "members": [{"podNumber": len(job.pods), "leafCellNumber": gpus, "taskRole": "worker"}],
        }
        attempt = f"0_{job.run}-{job.name}"
        fc = {
            "FC_FRAMEWORK_NAMESPACE": ns,
            "FC_FRAMEWORK_NAME": job.name,
            "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": attempt,
            "FC_TASKROLE_NAME": "worker",
            "FC_TASK_INDEX": str(index),
            "FC_TASK_ATTEMPT_ID": "0",
        }
        annotations.update(fc)
        labels.update(
            {"FC_FRAMEWORK_NAME": job.name, "FC_TASKROLE_NAME": "worker", "FC_TASK_INDEX": str(index)}
        )
        owner = [{"apiVersion": "v1", "kind": "ConfigMap", "name": f"{job.name}-attempt", "uid": attempt[2:]}]
    annotations[SPEC] = orjson.dumps(spec).decode()
    resources = {"cpu": str(12 * gpus), "memory": f"{200 * gpus}Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": owner,
        },
        "spec": {
            "schedulerName": "topogang",
            "priority": job.priority,
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.local/train:1.4",
                    "resources": {"requests": resources, "limits": {**resources, ENABLE: "1"}},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


# ---------------------------------------------------------------------------------------- fleet
class Fleet:
    """The jobs one load-generator process keeps running, near `fill` x the cluster's GPUs (what
    was used when it started counts too); pods bound per node, for preemption's dry run."""

    def __init__(self, cluster: Cluster, fill: float) -> None:
        self.cluster = cluster
        self.budget = max(0.0, fill * cluster.total_gpus - cluster.used_gpus)
        self.running: deque[Job] = deque()
        self.scheduling: dict[int, Job] = {}  # id -> a job whose members are being scheduled now
        self.finishing: dict[int, Job] = {}  # id -> a job whose pods are being deleted now
        self.used = 0
        self.on_node: dict[str, dict[str, tuple[int, Job]]] = {}  # node -> uid -> (priority, job)

    def to_finish(self, incoming: Job) -> Iterator[Job]:
        """The oldest running jobs, taken off the books, until `incoming` fits in the budget (jobs
        still being scheduled by another user are not running yet, so they are never touched)."""
        while self.running and self.used + incoming.gpus > self.budget:
            yield self.take(self.running[0])

    def take(self, job: Job) -> Job:
        """Forget a job (it is being finished or was preempted); the caller deletes its pods
        (`finish`), and until then it is listed as finishing."""
        self.finishing[id(job)] = job
        if not job.done:
            job.done = True
            if job in self.running:
                self.running.remove(job)
                self.used -= job.gpus
            for uid, node in job.bound.items():
                self.on_node.get(node, {}).pop(uid, None)
        return job

    def bound(self, job: Job, uid: str, node: str) -> None:
        job.bound[uid] = node

    def started(self, job: Job) -> None:
        """Every member is bound: the job runs (and may be finished or preempted from now on)."""
        self.running.append(job)
        self.used += job.gpus
        for uid, node in job.bound.items():
            self.on_node.setdefault(node, {})[uid] = (job.priority, job)

    def victims(self, nodes: Sequence[str], priority: int) -> dict[str, Any]:
        """kube-scheduler's dry run, roughly: on each candidate node, its lower-priority pods."""
        return kubesched.meta_victims(
            (node, [u for u, (p, _) in self.on_node.get(node, {}).items() if p < priority]) for node in nodes
        )

    def leftovers(self) -> list[Job]:
        """Every job with pods the server may still hold (running, or cut off mid-scheduling when the
        test stopped), so a stopping load test can delete them and leave the cluster as it found it."""
        return [*self.running, *self.scheduling.values(), *self.finishing.values()]

    def job_of(self, uid: str) -> Job | None:
        for pods in self.on_node.values():
            got = pods.get(uid)
            if got is not None:
                return got[1]
        return None


# ---------------------------------------------------------------------------------------- cycle
def expected_refusal(verb: str, error: str) -> bool:
    """A refusal the protocol expects under this load, not a failure of the server: a member's bind
    after its gang was preempted (or expired) while the member was still being scheduled (whole
    gangs are victims, bound members or not); kube-scheduler puts the pod back in its queue."""
    return verb == "bind" and "has no reservation" in error


class Cycle:
    """`extender.kubesched`'s transport and preemption for one job of a fleet: the verbs go out
    through `post` as bytes (the node list encoded once), victims are finished with their jobs."""

    def __init__(self, post: Post, fleet: Fleet, delete: Delete) -> None:
        self.post = post
        self.fleet = fleet
        self.delete = delete

    def _args(self, pod: kubesched.Pod, names: Sequence[str]) -> bytes:
        cluster = self.fleet.cluster
        listed = cluster.names_json if names is cluster.nodes else orjson.dumps(list(names))
        return b'{"Pod":' + orjson.dumps(pod) + b',"Nodes":null,"NodeNames":' + listed + b"}"

    def filter(self, pod: kubesched.Pod, names: Sequence[str]) -> Any:
        return self.post("filter", self._args(pod, names))

    def prioritize(self, pod: kubesched.Pod, names: Sequence[str]) -> Any:
        return self.post("prioritize", self._args(pod, names))

    def bind(self, pod: kubesched.Pod, node: str) -> Any:
        meta = pod["metadata"]
        return self.post(
            "bind",
            orjson.dumps(
                {
                    "PodName": meta["name"],
                    "PodNamespace": meta["namespace"],
                    "PodUID": meta["uid"],
                    "Node": node,
                }
            ),
        )

    def preempt(self, pod: kubesched.Pod, victims: Mapping[str, Any]) -> Any:
        body = b'{"Pod":' + orjson.dumps(pod) + b',"NodeNameToVictims":null,"NodeNameToMetaVictims":'
        return self.post("preempt", body + orjson.dumps(victims) + b"}")

    def dry_run(self, nodes: Sequence[str], priority: int) -> dict[str, Any]:
        return self.fleet.victims(nodes, priority)

    def evict(self, chosen: Mapping[str, Any]) -> None:
        """kube-scheduler deletes the victims on the node it picks; their whole jobs finish too."""
        for p in chosen[kubesched.fewest_victims(chosen)].get("Pods") or []:
            victim = self.fleet.job_of(p["UID"])
            if victim is not None:
                finish(self.fleet, self.fleet.take(victim), self.delete)


def schedule_pod(post: Post, fleet: Fleet, job: Job, pod: dict[str, Any], delete: Delete) -> str | None:
    """One kube-scheduler cycle for `pod`: the node it was bound to, or None (it waits, or a call
    failed)."""
    cycle = Cycle(post, fleet, delete)
    node = kubesched.drive(kubesched.schedule(pod, fleet.cluster.nodes, cycle), cycle).node
    if node is not None:
        fleet.bound(job, pod["metadata"]["uid"], node)
    return node


def finish(fleet: Fleet, job: Job, delete: Delete) -> None:
    """The job is over: delete its pods (what the API server would tell the extender). Listed as
    finishing meanwhile, so a test stopped halfway still finds the pods not yet deleted."""
    fleet.finishing[id(job)] = job
    for uid in job.uids:
        delete(uid)
    fleet.finishing.pop(id(job), None)


def run_job(post: Post, fleet: Fleet, job: Job, delete: Delete, rng: random.Random | None = None) -> bool:
    """Submit a job (its members in random order, as FrameworkController creates them); finish
    older jobs first so the fleet stays near its fill. True when every member was bound."""
    for old in list(fleet.to_finish(job)):
        finish(fleet, old, delete)
    order = list(range(len(job.pods)))
    (rng or random).shuffle(order)
    job.uids = [str(uuid.uuid4()) for _ in job.pods]
    fleet.scheduling[id(job)] = job  # not in a `finally`: a job cut off by a stop stays listed
    for i in order:
        if schedule_pod(post, fleet, job, pod_for(job, i, job.uids[i]), delete) is None:
            break
    del fleet.scheduling[id(job)]
    if len(job.bound) == len(job.pods):
        fleet.started(job)
        return True
    job.done = True
    finish(fleet, job, delete)  # it waits: give up and delete its pods (kube-scheduler would retry later)
    return False
