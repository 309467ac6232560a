"""What the bench-peers replay knows of each job: its attempts, and the record of multi-node gangs.

A job is submitted as attempts (`Attempt`): the first at its submit time, another after each
preemption (the rest of the attempt deleted, the job submitted again at once) and, for topogang,
when an opportunistic attempt still waiting is re-submitted guaranteed. `gang_log` turns the
attempts of every multi-node gang into the JSON's `gangs` (and `gang_line` into one log line each):
where each pod went, so a gang that left its rack shows which nodes it got and whether topogang's
own bind info planned them there.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.gangs.bindinfo import BindInfo, pod_bind_info
from loadtest.kube_report import wait_code
from loadtest.peers_cluster import rack_name
from loadtest.simulate.cluster import SimCluster
from loadtest.simulate.engine import JobRecord
from loadtest.simulate.trace import Job
from topology.decisions import WaitCode


@dataclass(slots=True)
class Attempt:
    """One submission of a job's pods, and what became of them."""

    number: int
    guaranteed: bool
    pods: list[str]  # pod names
    bound: dict[str, tuple[int, tuple[int, ...] | None]] = field(default_factory=dict)  # pod -> node, GPUs
    done: set[str] = field(default_factory=set)
    start_real: float | None = None
    end_real: float | None = None  # when its completion was set for
    abandoned: bool = False  # deleted by the harness (preempted or re-submitted)
    submit_real: float = 0.0
    ended: str = ""  # "finished", "preempted", "resubmitted", "refused quota" ("" while waiting or running)
    quota: dict[str, bool] = field(default_factory=dict)  # pod -> bound on its VC's cells (topogang)
    planned: tuple[str, ...] = ()  # topogang: the gang's nodes, slot by slot, in its first pod's bind info
    counted: bool = False  # topogang: its GPUs are in the harness's tally of its VC's quota in use


@dataclass(slots=True)
class JobState:
    """A job of the slice: its simulator record and its attempts, the last one current."""

    job: Job
    record: JobRecord
    attempts: list[Attempt] = field(default_factory=list)
    finished: bool = False
    refused_at: int | None = None  # topogang: its VC's releases when a guaranteed attempt was refused quota

    @property
    def current(self) -> Attempt:
        return self.attempts[-1]


def on_quota_cells(meta: Mapping[str, Any]) -> bool:
    """Whether topogang's bind info puts this pod on its VC's quota cells (HiveD's
    `preassignedCellTypes`, "" when opportunistic): an opportunistic gang's pods are re-written so
    once the extender promotes it (`extender.http.promotions`)."""
    info = _bind_info(meta)
    return info is not None and _own_cells_typed(info)


def _bind_info(meta: Mapping[str, Any]) -> BindInfo | None:
    try:
        return pod_bind_info(meta.get("annotations") or {})
    except ValueError:
        return None


def _own_cells_typed(info: BindInfo) -> bool:
    mine = [p for p in info.placements if p.node == info.node and p.gpus == info.gpus]
    return bool(mine) and any(mine[0].preassigned_cell_types)


def refused_quota(pod: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler's last word on an unbound pod is topogang's `[InsufficientQuota]`:
    its VC has no quota left for it, as `kubectl describe pod` shows its user."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return wait_code(str(cond.get("message") or "")) == WaitCode.INSUFFICIENT_QUOTA.value
    return False


def note_bind_info(att: Attempt, name: str, meta: Mapping[str, Any]) -> None:
    """What topogang's bind info says of a gang's pod: whether its GPUs are on its VC's quota
    cells (HiveD's `preassignedCellTypes`, "" when opportunistic) and, from the gang's first
    bound pod, the node of every slot (so a pod bound elsewhere than its slot shows)."""
    if len(att.pods) < 2:
        return
    info = _bind_info(meta)
    if info is None:
        return
    att.quota[name] = _own_cells_typed(info)
    if not att.planned:
        att.planned = tuple(p.node for p in info.placements)


def gang_log(
    jobs: Mapping[int, JobState],
    cluster: SimCluster,
    warm: Collection[int],
    trace_now: Callable[[float], float],
) -> list[dict[str, Any]]:
    """Every multi-node gang (warm ones too), attempt by attempt: guaranteed or opportunistic as
    submitted, when it was submitted and started (trace hours), how it ended, and where each pod
    went (node, rack, GPU indices; for topogang whether the bind info put it on its VC's quota
    cells, and the slots' nodes as its first bound pod's bind info planned them)."""
    names = cluster.node_names
    per = cluster.gpus_per_node
    out: list[dict[str, Any]] = []
    for jid, st in sorted(jobs.items()):
        job = st.job
        if job.held_gpus <= per:
            continue
        attempts = []
        for att in st.attempts:
            pods = []
            for p in att.pods:
                if p not in att.bound:
                    continue
                n, gpus = att.bound[p]
                pods.append(
                    {
                        "pod": p,
                        "node": names[n],
                        "rack": rack_name(cluster, n),
                        "gpus": None if gpus is None else list(gpus),
                        "on_quota": att.quota.get(p),
                    }
                )
            racks = sorted({str(p["rack"]) for p in pods})
            attempts.append(
                {
                    "attempt": att.number,
                    "guaranteed": att.guaranteed,
                    "submitted_h": round(trace_now(att.submit_real) / 3600, 3),
                    "started_h": None
                    if att.start_real is None
                    else round(trace_now(att.start_real) / 3600, 3),
                    "ended": att.ended or ("running" if att.start_real is not None else "waiting"),
                    "racks": racks,
                    "one_rack": len(racks) == 1 and len(pods) == len(att.pods),
                    "pods": pods,
                    "planned": list(att.planned),
                }
            )
        out.append(
            {
                "job": jid,
                "vc": job.vc,
                "gpus": job.gpus,
                "pods": len(job.pods),
                "warm": jid in warm,
                "attempts": attempts,
            }
        )
    return out


def gang_line(g: dict[str, Any]) -> str:
    """One multi-node gang of `gang_log` in a line: each attempt's kind, fate and racks."""
    parts = []
    for a in g["attempts"]:
        kind = "guaranteed" if a["guaranteed"] else "opportunistic"
        where = " ".join(
            f"{p['node']}" + ("" if p["on_quota"] is None else "/q" if p["on_quota"] else "/o")
            for p in a["pods"]
        )
        parts.append(f"a{a['attempt']} {kind} {a['ended']} [{where}]")
    return f"j{g['job']} {g['vc']} {g['gpus']} GPUs: " + "; ".join(parts)
