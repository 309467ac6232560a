"""`kueue-like`: Kueue's quota model with cohort borrowing, reclaim, and Topology Aware Scheduling.

What it models (Kueue's own terms, from the Kueue docs at
kueue.sigs.k8s.io, "Cluster Queue", "Preemption" and "Topology Aware Scheduling"):
- one ClusterQueue per VC, `nominalQuota` = the VC's GPUs, every ClusterQueue in one cohort, no
  `borrowingLimit` or `lendingLimit`: a VC may borrow any GPUs the cohort leaves unused;
- admission per VC in FIFO order (`queueingStrategy: StrictFIFO`, the engine's rule for every policy);
- a workload within its VC's nominal quota that does not fit reclaims borrowed GPUs by preemption
  (`reclaimWithinCohort: Any`): candidates are the running workloads of VCs that are above their
  nominal quota at that moment, the most recently admitted first (Kueue's candidate order for equal
  priorities); they are taken off one by one until the workload fits, then every one whose GPUs the
  workload does not need is put back (Kueue's minimal preemption set: `candidatesOrdering` and
  `minimalPreemptions` in kubernetes-sigs/kueue `pkg/scheduler/preemption/preemption.go`). A
  borrowing workload never preempts (`borrowWithinCohort: Never`, the default), and all trace jobs
  share one priority, so `withinClusterQueue` never applies;
- TAS with the preferred topology: each gang goes into the smallest domain that holds it (one node,
  else one rack, else the fewest nodes anywhere), and among the domains of that level into the one
  with the least free GPUs that suffice (TAS's BestFit). Kueue sees nodes, not GPUs: the kubelet's
  device plugin hands out the lowest-numbered free GPUs of the node, so a pod may straddle the
  node's NVLink/PCIe halves.

Not modelled: Kueue's fair sharing (off by default), admission checks, waitForPodsReady (every gang
starts whole here), and the time a preempted workload takes to go.

`kai-like` is not a separate policy: for this trace (one priority, one level of queues, quotas equal
to the VC sizes) KAI-scheduler's over-quota sharing with fair-share reclaim and its bin-packing
topology-aware gang placement take the same decisions as this model; KAI's distinguishing features
(over-quota weights, DRF between many over-quota queues, consolidation by moving running pods,
fractional GPUs) either have no input in the trace or move running jobs, which no policy here does.
"""

from __future__ import annotations

from loadtest.simulate.cluster import SimCluster
from loadtest.simulate.policies import NodeGpus, Placement, Policy
from loadtest.simulate.trace import Job


class KueueLikePolicy(Policy):
    name = "kueue-like"

    def __init__(self, cluster: SimCluster) -> None:
        super().__init__(cluster)
        per = cluster.gpus_per_node
        self.free: list[list[int]] = [list(range(per)) for _ in range(cluster.nodes)]
        self.vc_used: dict[str, int] = {}
        self.admitted_at: dict[int, tuple[float, int]] = {}  # job id -> (time, admission sequence)
        self.jobs: dict[int, Job] = {}
        self.placed: dict[int, Placement] = {}  # the base class forgets a placement before `_release`
        self.seq = 0
        self.preempt_count = 0

    # ------------------------------------------------------------------ quota
    def nominal(self, vc: str) -> int:
        return self.cluster.quota_gpus(vc)

    def within_quota(self, job: Job) -> bool:
        return self.vc_used.get(job.vc, 0) + job.held_gpus <= self.nominal(job.vc)

    def _borrowing(self, vc: str) -> bool:
        return self.vc_used.get(vc, 0) > self.nominal(vc)

    # ------------------------------------------------------------------ admission
    def _place(self, job: Job, now: float) -> Placement | None:
        # the cohort's unused quota is whatever the cluster does not hold (quotas sum to the cluster)
        if self.allocated + job.held_gpus <= self.cluster.total_gpus:
            got = self._tas(job.pods)
            if got is not None:
                return self._admit(job, got, now, ())
        if not self.within_quota(job):
            return None  # a borrower waits; it never preempts
        return self._reclaim(job, now)

    def _admit(self, job: Job, pods: list[NodeGpus], now: float, victims: tuple[int, ...]) -> Placement:
        for n, gs in pods:
            taken = set(gs)
            self.free[n] = [g for g in self.free[n] if g not in taken]
        self.vc_used[job.vc] = self.vc_used.get(job.vc, 0) + job.held_gpus
        self.jobs[job.id] = job
        self.seq += 1
        self.admitted_at[job.id] = (now, self.seq)
        placement = Placement(tuple(pods), preempted=victims)
        self.placed[job.id] = placement
        return placement

    def _release(self, job: Job, now: float) -> None:
        self._give_back(job.id, self.placed.pop(job.id))

    def _give_back(self, jid: int, placement: Placement) -> None:
        job = self.jobs.pop(jid)
        for n, gs in placement.pods:
            self.free[n] = sorted(self.free[n] + list(gs))
        self.vc_used[job.vc] -= job.held_gpus
        self.admitted_at.pop(jid)

    def _reclaim(self, job: Job, now: float) -> Placement | None:
        """Take borrowed GPUs back, newest admissions of borrowing VCs first; change nothing if the
        job still does not fit with every candidate gone."""
        order = sorted(self.admitted_at, key=lambda j: self.admitted_at[j], reverse=True)
        removed: list[tuple[int, Placement]] = []
        got: list[NodeGpus] | None = None
        for jid in order:
            vc = self.jobs[jid].vc
            if not self._borrowing(vc):
                continue
            placement = self.running[jid]
            removed.append((jid, placement))
            self._give_back_keep(jid, placement)
            if self.allocated_after(removed) + job.held_gpus > self.cluster.total_gpus:
                continue
            got = self._tas(job.pods)
            if got is not None:
                break
        if got is None:
            for jid, placement in reversed(removed):
                self._retake(jid, placement)
            return None
        needed = {(n, g) for n, gs in got for g in gs}
        victims: list[int] = []
        for jid, placement in reversed(removed):
            if any((n, g) in needed for n, gs in placement.pods for g in gs):
                victims.append(jid)
            else:
                self._retake(jid, placement)
        for jid in victims:
            self.jobs.pop(jid)
            self.admitted_at.pop(jid)
            self.placed.pop(jid)
            self._evicted(jid)
        self.preempt_count += len(victims)
        return self._admit(job, got, now, tuple(sorted(victims)))

    def allocated_after(self, removed: list[tuple[int, Placement]]) -> int:
        return self.allocated - sum(p.gpus for _, p in removed)

    def _give_back_keep(self, jid: int, placement: Placement) -> None:
        """Free a candidate's GPUs and quota for a what-if, keeping its records for `_retake`."""
        job = self.jobs[jid]
        for n, gs in placement.pods:
            self.free[n] = sorted(self.free[n] + list(gs))
        self.vc_used[job.vc] -= job.held_gpus

    def _retake(self, jid: int, placement: Placement) -> None:
        job = self.jobs[jid]
        for n, gs in placement.pods:
            taken = set(gs)
            self.free[n] = [g for g in self.free[n] if g not in taken]
        self.vc_used[job.vc] += job.held_gpus

    # ------------------------------------------------------------------ topology aware scheduling
    def _tas(self, pods: tuple[int, ...]) -> list[NodeGpus] | None:
        """The gang in the smallest domain that holds it, best fit; None if nowhere."""
        cluster = self.cluster
        free = self.free
        if len(pods) == 1:
            size = pods[0]
            fits = [(len(free[n]), n) for n in range(cluster.nodes) if len(free[n]) >= size]
            if not fits:
                return None
            n = min(fits)[1]
            return [(n, tuple(free[n][:size]))]
        racks = -(-cluster.nodes // cluster.rack_size)
        best: tuple[int, int] | None = None
        for r in range(racks):
            nodes = range(r * cluster.rack_size, min((r + 1) * cluster.rack_size, cluster.nodes))
            got = self._fill(list(nodes), pods)
            if got is not None:
                cap = sum(len(free[n]) for n in nodes)
                if best is None or (cap, r) < best:
                    best = (cap, r)
        if best is not None:
            r = best[1]
            nodes = range(r * cluster.rack_size, min((r + 1) * cluster.rack_size, cluster.nodes))
            return self._fill(list(nodes), pods)
        return self._fill(list(range(cluster.nodes)), pods)

    def _fill(self, nodes: list[int], pods: tuple[int, ...]) -> list[NodeGpus] | None:
        """Pods (largest first) onto `nodes`, each on the fullest node that still holds it."""
        left = {n: list(self.free[n]) for n in nodes}
        out: list[NodeGpus | None] = [None] * len(pods)
        for i in sorted(range(len(pods)), key=lambda i: (-pods[i], i)):
            size = pods[i]
            fits = [(len(left[n]), n) for n in nodes if len(left[n]) >= size]
            if not fits:
                return None
            n = min(fits)[1]
            out[i] = (n, tuple(left[n][:size]))
            left[n] = left[n][size:]
        return [p for p in out if p is not None]
