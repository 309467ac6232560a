"""Scheduling policies the simulator compares, behind one interface.

- `topogang`: the real `Core`, VC quotas as node cells. A job runs guaranteed (priority 0) inside
  its VC's cells when they can hold it; otherwise, if its VC has room in count but the cells are
  borrowed, it preempts opportunistic gangs (through `Core.preempt` when the core names victims,
  else by the simulator's own what-if, below), unless the core starts it as a guest in free room
  instead (its request sets `promote_when_quota`, `topology.room`); failing that it runs
  opportunistically (priority −1) on idle cells of any VC, and can be preempted later.
- `hived-like`: the same core with borrowing off: a job waits for its own VC's cells.
- `first-fit`: topology-blind. A VC may hold up to its quota's GPU count anywhere; a pod takes the
  first node (in node order) with enough free GPUs, and the lowest-numbered free GPUs there.
- `first-fit-elastic`: the same, but a VC may exceed its count quota on idle GPUs and nothing is
  ever preempted (YARN-CS-style elastic capacity without preemption), so in effect no quota binds.
  This is the count-quota sharing that HiveD's sharing anomaly is about.

Every policy keeps the same per-node bookkeeping (allocated GPUs, stranded GPUs, whole free nodes)
from the placements it hands out, so the probes mean the same thing for all of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache

from config.schema import STRICT_FIFO
from loadtest.firstfit import IndexedFirstFit
from loadtest.simulate.cluster import SimCluster, private_cluster
from loadtest.simulate.trace import Job
from topology.core import Core
from topology.decisions import (
    OPPORTUNISTIC_PRIORITY,
    AdoptedPod,
    GangPlacement,
    GangRequest,
    Member,
    Preemption,
    Wait,
    WaitCode,
)

NodeGpus = tuple[int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a started job runs: (node index, GPU indices) per pod. `preempted` lists the job ids the
    policy evicted to make room; the engine puts them back at the front of their queues."""

    pods: tuple[NodeGpus, ...]
    opportunistic: bool = False
    preempted: tuple[int, ...] = ()

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(n for n, _ in self.pods))

    @property
    def gpus(self) -> int:
        return sum(len(g) for _, g in self.pods)


@dataclass(frozen=True, slots=True)
class Locality:
    """How close a placement keeps a job's GPUs (None: the question does not apply to this job)."""

    one_node: bool | None  # jobs of ≤ 8 GPUs: all on one node
    one_half: bool | None  # jobs of ≤ 4 GPUs: all in one NVLink/PCIe half
    min_nodes_one_rack: bool | None  # multi-node gangs: the fewest nodes possible, all in one rack


def locality(cluster: SimCluster, job: Job, placement: Placement) -> Locality:
    nodes = placement.nodes
    one_node = len(nodes) == 1
    per_node = cluster.gpus_per_node
    one_half: bool | None = None
    if job.gpus <= per_node // 2:
        halves = {(n, cluster.half_of(g)) for n, gs in placement.pods for g in gs}
        one_half = len(halves) == 1
    rack: bool | None = None
    if job.held_gpus > per_node:
        minimal = len(nodes) == -(-job.held_gpus // per_node)
        rack = minimal and len({cluster.rack_of(n) for n in nodes}) == 1
    return Locality(one_node if job.gpus <= per_node else None, one_half, rack)


class Policy(ABC):
    """A scheduler under test. `try_start` places the whole job now or returns None (and then
    changes nothing); `finish` gives its GPUs back."""

    name: str = "policy"
    vcs_independent = False  # True: only a VC's own releases can let its waiting head start
    # how the engine offers a VC's queued jobs (engine docstring): only the head (StrictFIFO), or
    # Kueue's BestEffortFIFO, where a head that cannot start lets the next job try
    queueing: str = STRICT_FIFO
    # BestEffortFIFO only: trace seconds from a release until the jobs set aside are offered a start
    # again (Kueue waits a 1 s batch period; 0: at once, as the simulator runs every policy)
    requeue_delay: float = 0.0
    # BestEffortFIFO only, for the calibration's what-if of a live control plane (kueue.py, "Time"):
    # trace seconds from a job's submit until it is queued, and between two starts
    arrival_delay: float = 0.0
    admission_gap: float = 0.0

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.used: list[int] = [0] * cluster.nodes
        self.allocated = 0
        self.stranded = 0  # free GPUs on nodes that are partly used (cannot host a whole-node pod)
        self.whole_free_nodes = cluster.nodes
        self.running: dict[int, Placement] = {}

    # ------------------------------------------------------------------ interface
    def try_start(self, job: Job, now: float) -> Placement | None:
        placement = self._place(job, now)
        if placement is None:
            return None
        self.running[job.id] = placement
        self._account(placement, 1)
        return placement

    def finish(self, job: Job, now: float) -> None:
        placement = self.running.pop(job.id)
        self._release(job, now)
        self._account(placement, -1)

    def within_quota(self, job: Job) -> bool:
        """Does the job's VC have quota left (in GPU count) for it? Policies without quotas: True."""
        return True

    def borrows(self, job: Job) -> bool:
        """Would starting `job` now take its VC above its quota? BestEffortFIFO offers the jobs
        that would not first; StrictFIFO policies are never asked."""
        return not self.within_quota(job)

    @abstractmethod
    def _place(self, job: Job, now: float) -> Placement | None: ...

    @abstractmethod
    def _release(self, job: Job, now: float) -> None: ...

    # ------------------------------------------------------------------ probes
    def _evicted(self, job_id: int) -> Placement:
        """Bookkeeping for a job the policy preempted (its scheduler state is already gone)."""
        placement = self.running.pop(job_id)
        self._account(placement, -1)
        return placement

    def _account(self, placement: Placement, sign: int) -> None:
        cap = self.cluster.gpus_per_node
        for n, gpus in placement.pods:
            before = self.used[n]
            after = before + sign * len(gpus)
            assert 0 <= after <= cap, f"node {n} would hold {after} of {cap} GPUs"
            self.used[n] = after
            self.stranded += (cap - after if after else 0) - (cap - before if before else 0)
            self.whole_free_nodes += (after == 0) - (before == 0)
        self.allocated += sign * placement.gpus


class FirstFitPolicy(Policy):
    name = "first-fit"

    def __init__(self, cluster: SimCluster) -> None:
        super().__init__(cluster)
        self.ff = IndexedFirstFit([cluster.gpus_per_node] * cluster.nodes)
        self.vc_used: dict[str, int] = {}

    def _place(self, job: Job, now: float) -> Placement | None:
        if not self.within_quota(job):
            return None
        got = self.ff.place(job.id, list(job.pods))
        if got is None:
            return None
        self.vc_used[job.vc] = self.vc_used.get(job.vc, 0) + job.held_gpus
        return Placement(tuple(got))

    def within_quota(self, job: Job) -> bool:
        return self.vc_used.get(job.vc, 0) + job.held_gpus <= self.cluster.quota_gpus(job.vc)

    def _release(self, job: Job, now: float) -> None:
        self.ff.release(job.id)
        self.vc_used[job.vc] -= job.held_gpus


class ElasticFirstFitPolicy(FirstFitPolicy):
    name = "first-fit-elastic"

    def _place(self, job: Job, now: float) -> Placement | None:
        got = self.ff.place(job.id, list(job.pods))
        if got is None:
            return None
        self.vc_used[job.vc] = self.vc_used.get(job.vc, 0) + job.held_gpus
        return Placement(tuple(got))


def members(pods: tuple[int, ...]) -> tuple[Member, ...]:
    counts: dict[int, int] = {}
    for g in pods:
        counts[g] = counts.get(g, 0) + 1
    return tuple(Member(n, g) for g, n in sorted(counts.items(), reverse=True))


class CorePolicy(Policy):
    """The real scheduling core; `borrowing` turns opportunistic jobs and preemption on."""

    def __init__(
        self, cluster: SimCluster, *, borrowing: bool, name: str | None = None, vc_queueing: str = STRICT_FIFO
    ) -> None:
        super().__init__(cluster)
        self.name = name or ("topogang" if borrowing else "hived-like")
        # the extender's `topogang.vcQueueing`: StrictFIFO (its default) holds a VC's later gangs
        # behind its oldest waiting one, as the engine's StrictFIFO does; BestEffortFIFO lets them
        # go on, the jobs within their VC's quota first (kube-scheduler takes pods of higher
        # priority first: guaranteed before opportunistic)
        self.queueing = vc_queueing
        self.borrowing = borrowing
        self.core = Core(cluster.spec)
        if tuple(self.core.node_names()) != cluster.node_names:
            raise ValueError("the core numbers the cluster's nodes differently from the simulator")
        self.node_index = dict(self.core.node_index())
        self.jobs: dict[int, Job] = {}
        self.started_at: dict[int, float] = {}
        self.opportunistic: set[int] = set()
        self.guaranteed_gpus: dict[str, int] = {}
        # without borrowing, a VC's head is helped only by its own VC's releases (HiveD's safety:
        # its quota cells can always be bound, whatever other VCs do), so the engine may skip
        # retrying it after another VC's release
        self.vcs_independent = not borrowing
        self.core_preempts = core_names_victims()
        self.preempt_calls = 0
        self.fallback_preemptions = 0

    # ------------------------------------------------------------------ start
    def _place(self, job: Job, now: float) -> Placement | None:
        # with borrowing, the job may start as a guest in free room rather than preempt running
        # work, and is promoted when its VC has room (`topology.room`)
        req = GangRequest(job.name, job.vc, members(job.pods), promote_when_quota=self.borrowing)
        wait: Wait | None = None
        # quota in count is a necessary condition the simulator can check for free; asking the core
        # anyway would cost a failed search (and, with preemption, a victim dry run) per attempt
        if self.within_quota(job):
            got = self.core.reserve(req, now)
            if isinstance(got, GangPlacement):
                return self._started(job, got, now)
            wait = got
        if not self.borrowing:
            return None
        if wait is not None and self.opportunistic:
            placed = self._preempt(job, req, wait, now)
            if placed is not None:
                return placed
        opp = GangRequest(
            job.name, job.vc, members(job.pods), priority=OPPORTUNISTIC_PRIORITY, promote_when_quota=True
        )
        got = self.core.reserve(opp, now)
        if isinstance(got, GangPlacement):
            return self._started(job, got, now)
        return None

    def within_quota(self, job: Job) -> bool:
        return self.quota_left(job.vc) >= job.held_gpus

    def quota_left(self, vc: str) -> int:
        """GPUs of the VC's quota not held by its guaranteed jobs."""
        return self.cluster.quota_gpus(vc) - self.guaranteed_gpus.get(vc, 0)

    def _started(self, job: Job, got: GangPlacement, now: float, victims: tuple[int, ...] = ()) -> Placement:
        for pod in got.pods:
            self.core.claim(job.name, _uid(job, pod.slot), len(pod.gpu_indices), now, node=pod.node)
        self.jobs[job.id] = job
        self.started_at[job.id] = now
        opp = got.priority < 0
        if opp:
            self.opportunistic.add(job.id)
        else:
            self.guaranteed_gpus[job.vc] = self.guaranteed_gpus.get(job.vc, 0) + job.held_gpus
        pods = tuple((self.node_index[p.node], p.gpu_indices) for p in got.pods)
        return Placement(pods, opp, victims)

    def _release(self, job: Job, now: float) -> None:
        self.core.delete_gang(job.name)
        self._forget(job.id)
        self._note_promotions()

    def _note_promotions(self) -> None:
        """Opportunistic jobs the core promoted into their VC's quota after a release."""
        for jid in sorted(self.opportunistic):
            g = self.core.gang(self.jobs[jid].name)
            if g is not None and g.priority >= 0:
                self.opportunistic.discard(jid)
                job = self.jobs[jid]
                self.guaranteed_gpus[job.vc] = self.guaranteed_gpus.get(job.vc, 0) + job.held_gpus

    def _forget(self, jid: int) -> None:
        job = self.jobs.pop(jid)
        self.started_at.pop(jid)
        if jid in self.opportunistic:
            self.opportunistic.discard(jid)
        else:
            self.guaranteed_gpus[job.vc] -= job.held_gpus

    # ------------------------------------------------------------------ preemption
    def _preempt(self, job: Job, req: GangRequest, wait: Wait, now: float) -> Placement | None:
        """Start the guaranteed gang over opportunistic victims, or change nothing."""
        if self.core_preempts:
            if wait.reason.code in (WaitCode.PREEMPTIBLE, WaitCode.PREEMPTING):
                return self._core_preempt(job, req, now)
            return None
        if wait.reason.code is WaitCode.INSUFFICIENT_QUOTA:
            return None
        return self._whatif_preempt(job, req, now)

    def _core_preempt(self, job: Job, req: GangRequest, now: float) -> Placement | None:
        self.preempt_calls += 1
        got = self.core.preempt(req, now)
        if isinstance(got, GangPlacement):
            return self._started(job, got, now)
        if isinstance(got, Wait):
            return None
        victims = self._kill(got)
        placed = self.core.reserve(req, now)
        if not isinstance(placed, GangPlacement):
            raise RuntimeError(
                f"core preempted {len(victims)} gangs for {job.name} but still does not place it: "
                f"{placed.reason.message}"
            )
        return self._started(job, placed, now, victims)

    def _kill(self, got: Preemption) -> tuple[int, ...]:
        ids = sorted({_job_id(v.gang) for v in got.victims})
        for jid in ids:
            self._evict(jid)
        self._note_promotions()
        return tuple(ids)

    def _evict(self, jid: int) -> None:
        self.core.delete_gang(self.jobs[jid].name)
        self._forget(jid)
        self._evicted(jid)

    def _whatif_preempt(self, job: Job, req: GangRequest, now: float) -> Placement | None:
        """For a core without victim search: take opportunistic gangs off, youngest first, in
        doubling batches until the gang fits; then put back (re-adopt, same GPUs) every one the
        placement does not overlap. If it never fits, every one is put back: nothing changes."""
        candidates = sorted(self.opportunistic, key=lambda j: (-self.started_at[j], -j))
        removed: list[int] = []
        placed: GangPlacement | None = None
        batch = 1
        while len(removed) < len(candidates):
            for jid in candidates[len(removed) : len(removed) + batch]:
                self.core.delete_gang(self.jobs[jid].name)
                removed.append(jid)
            batch *= 2
            got = self.core.reserve(req, now)
            if isinstance(got, GangPlacement):
                placed = got
                break
        taken = set() if placed is None else {(p.node, g) for p in placed.pods for g in p.gpu_indices}
        victims: list[int] = []
        for jid in removed:
            pl = self.running[jid]
            names = self.cluster.node_names
            if any((names[n], g) in taken for n, gs in pl.pods for g in gs):
                victims.append(jid)
            else:
                self._readopt(jid, pl, now)
        if placed is None:
            return None
        for jid in victims:
            self._forget(jid)
            self._evicted(jid)
        self.fallback_preemptions += len(victims)
        return self._started(job, placed, now, tuple(sorted(victims)))

    def _readopt(self, jid: int, placement: Placement, now: float) -> None:
        job = self.jobs[jid]
        req = GangRequest(job.name, job.vc, members(job.pods), priority=OPPORTUNISTIC_PRIORITY)
        names = self.cluster.node_names
        pods = [AdoptedPod(_uid(job, i), names[n], gs) for i, (n, gs) in enumerate(placement.pods)]
        self.core.adopt(req, pods, now)


def _uid(job: Job, slot: int) -> str:
    return f"{job.name}-{slot}"


def _job_id(gang: str) -> int:
    return int(gang[1:])


@cache
def core_names_victims() -> bool:
    """Does this build of the core find preemption victims itself? (A one-node probe: an
    opportunistic gang fills the node, then a guaranteed gang of the same VC asks for it.)"""
    cluster = private_cluster("probe", 1)
    core = Core(cluster.spec)
    opp = GangRequest("o", "probe", (Member(1, 8),), priority=OPPORTUNISTIC_PRIORITY)
    got = core.reserve(opp, 0.0)
    if not isinstance(got, GangPlacement):
        return False
    core.claim("o", "o-0", 8, 0.0)
    answer = core.preempt(GangRequest("g", "probe", (Member(1, 8),)), 0.0)
    return isinstance(answer, Preemption) and bool(answer.victims)
