"""The soak's job mix: what users submit, as the pods (and PodGroups, Frameworks) they would write.

Every kind of gang the extender identifies is in the mix, so every path through it is soaked:

- `single`: one pod with a topogang spec and no affinity group (a one-pod gang);
- `gang`: an affinity group of 2-4 pods, sometimes with `gangReleaseEnable` or
  `lazyPreemptionEnable`, sometimes one member late or never (its reservation then expires);
- `fc`: FrameworkController task pods with an affinity group naming `taskRole` (slots by task);
- `fcfw`: FrameworkController task pods without an affinity group: the gang's shape is read from
  the Framework object (a custom resource in the fake API);
- `cosched`: scheduler-plugins coscheduling, a PodGroup (custom resource) with minMember below the
  pod count, so the last member is an elastic extra;
- `gpu`: a plain `nvidia.com/gpu` pod of topogang's profile, no spec (a one-pod gang).

Guaranteed priorities 0..500 in each VC's quota and opportunistic (-1) jobs, so preemption happens.
Names are deterministic (a counter), so a seed replays the same jobs.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

SPEC = "topogang.io/pod-scheduling-spec"
ENABLE = "topogang.io/pod-scheduling-enable"
JOB_LABEL = "soak.topogang.io/job"
MEMBER_LABEL = "soak.topogang.io/member"
FRAMEWORKS = "/apis/frameworkcontroller.microsoft.com/v1/namespaces/{ns}/frameworks"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"

VCS = ("vision", "nlp", "research")  # namespace = VC in the example config
GANG_SHAPES = {  # (pods, GPUs each) per VC: whole racks and nodes for vision, halves for research
    "vision": ((2, 8), (4, 8), (3, 4), (2, 2)),
    "nlp": ((2, 8), (3, 2), (2, 4)),
    "research": ((2, 4), (3, 2)),
}


@dataclass
class Job:
    """One user job: `size` pods of `gpus` GPUs each, in `namespace`."""

    name: str
    kind: str
    namespace: str
    size: int
    gpus: int
    priority: int
    spec_extra: dict[str, Any] = field(default_factory=dict)
    late: dict[int, float] = field(default_factory=dict)  # member -> when it is first created
    attempt: int = 0  # FrameworkController attempt (a retry makes a new gang)
    state: str = "active"  # active | done | deleted
    done_at: float = 0.0
    owner_path: str | None = None  # the PodGroup / Framework object, deleted with the job
    class_value: int | None = None  # a PriorityClass's value: spec.priorityClassName set, spec.priority this
    asks_priority: bool = True  # the scheduling spec names its priority (else the class's holds)

    @property
    def key(self) -> str:
        """Its key among the soak's jobs: another tenant's job may share its name."""
        return f"{self.namespace}/{self.name}"

    def pod_name(self, index: int) -> str:
        return f"{self.name}-{index}"

    @property
    def attempt_uid(self) -> str:
        return f"{self.attempt}_{self.name}-a{self.attempt}"

    def pod(self, index: int) -> dict[str, Any]:
        """The pod manifest of member `index`, as its controller creates it."""
        labels = {JOB_LABEL: self.name, MEMBER_LABEL: str(index)}
        annotations: dict[str, str] = {}
        limits: dict[str, str] = {ENABLE: "1"}
        spec_doc: dict[str, Any] = {
            "virtualCluster": self.namespace,
            "priority": self.priority,
            "leafCellNumber": self.gpus,
            **self.spec_extra,
        }
        if not self.asks_priority:
            del spec_doc["priority"]
        if self.kind == "gang":
            spec_doc["affinityGroup"] = {
                "name": self.name,
                "members": [{"podNumber": self.size, "leafCellNumber": self.gpus}],
            }
        if self.kind in ("fc", "fcfw"):
            annotations.update(
                {
                    "FC_FRAMEWORK_NAMESPACE": self.namespace,
                    "FC_FRAMEWORK_NAME": self.name,
                    "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": self.attempt_uid,
                    "FC_TASKROLE_NAME": "worker",
                    "FC_TASK_INDEX": str(index),
                }
            )
        if self.kind == "fc":
            spec_doc["affinityGroup"] = {
                "name": self.name,
                "members": [{"podNumber": self.size, "leafCellNumber": self.gpus, "taskRole": "worker"}],
            }
        if self.kind in ("cosched", "gpu"):
            limits = {"nvidia.com/gpu": str(self.gpus)}
            if self.kind == "cosched":
                labels["scheduling.x-k8s.io/pod-group"] = self.name
        else:
            annotations[SPEC] = json.dumps(spec_doc, sort_keys=True)
        pod_spec: dict[str, Any] = {
            "schedulerName": "topogang",
            "priority": self.priority,
            "terminationGracePeriodSeconds": 10,
            "containers": [{"name": "main", "image": "trainer", "resources": {"limits": limits}}],
        }
        if self.class_value is not None:  # as admission leaves it: the class's value in spec.priority
            pod_spec["priorityClassName"], pod_spec["priority"] = "soak-class", self.class_value
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.pod_name(index),
                "namespace": self.namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "spec": pod_spec,
            "status": {"phase": "Pending"},
        }

    def owner(self) -> tuple[str, dict[str, Any]] | None:
        """The API object the job's pods refer to (collection path, body), if any."""
        if self.kind == "cosched":
            return PODGROUPS.format(ns=self.namespace), {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"minMember": self.size - 1},
            }
        if self.kind == "fcfw":
            template = self.pod(0)
            template["metadata"] = {"annotations": {SPEC: template["metadata"]["annotations"][SPEC]}}
            return FRAMEWORKS.format(ns=self.namespace), {
                "apiVersion": "frameworkcontroller.microsoft.com/v1",
                "kind": "Framework",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "taskRoles": [{"name": "worker", "taskNumber": self.size, "task": {"pod": template}}]
                },
            }
        return None


def _priority(rng: random.Random) -> int:
    return rng.choice((-1, -1, 0, 10, 100, 100, 500))


def new_job(rng: random.Random, serial: int, now: float, ttl: float) -> Job:
    """A job drawn from the mix; late members arrive within two TTLs (some after it expired)."""
    kind = rng.choices(("single", "gang", "fc", "fcfw", "cosched", "gpu"), weights=(30, 30, 10, 8, 8, 14))[0]
    ns = rng.choice(VCS)
    name = f"{kind}-{serial}"
    prio = _priority(rng)
    if kind in ("single", "gpu"):
        gpus = rng.choice((1, 1, 1, 2, 2, 4, 8)) if ns != "research" else rng.choice((1, 2, 4))
        return Job(name, kind, ns, 1, gpus, prio if kind == "single" else 0)
    if kind == "cosched":
        return Job(name, kind, ns, 3, rng.choice((1, 2)), 0)
    size, gpus = rng.choice(GANG_SHAPES[ns])
    extra: dict[str, Any] = {}
    if kind == "gang":
        if rng.random() < 0.2:
            extra["gangReleaseEnable"] = True
        if rng.random() < 0.2:
            extra["lazyPreemptionEnable"] = True
    job = Job(name, kind, ns, size, gpus, prio, extra)
    if kind == "gang" and rng.random() < 0.15:
        job.late[rng.randrange(size)] = now + rng.uniform(0, 2 * ttl)
    return job
