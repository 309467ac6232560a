"""Work-preserving reconfiguration: a new core from an edited config, with every running pod kept.

HiveD "reloads" by exiting and rebuilding from pod annotations, losing preemptions in flight. Here a
new core is built beside the old one and every gang is adopted into it where its pods already run:
guaranteed gangs first (highest priority, then oldest), so they keep their VC cells; a gang that no
longer fits its VC keeps running downgraded to opportunistic; pods on hardware that is gone are
reported. Nothing is moved and no GPU is given twice. A preemption in flight is reserved again over
its victims once they are adopted, as a restart restores it (`Core.restore`), so a victim stays
closed to new pods while it waits (HiveD binds no pod of a BeingPreempted group); only one the new
config cannot hold is dropped and reported, and kube-scheduler retries it. Each gang is adopted with
the quota cell type every GPU holds, as a restart reads them from the bind info: the VC binds the
same cells again (a two-node gang on the VC's rack cell does not take a node cell another gang will
need), a gang that held none (a guest, one downgraded) comes back opportunistic, a promoted one
promoted; one downgraded stays so (`recovery.keep_downgraded`: not promoted, and no guest).

The report's `impacts` is the one judgement of what an edit costs the gangs that run: the hot
reload refuses an unconfirmed edit that has any (`extender/http/reload.py`), and `topogang diff
--against` prints them (`config/against.py`, on a core rebuilt from the extender's reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topology.core import Core
from topology.decisions import AdoptedPod
from topology.gangs import keep_until_gone, release
from topology.recovery import keep_downgraded, mark_downgraded
from topology.reservations import Gang, GangPhase
from topology.spec import ClusterSpec


@dataclass(frozen=True, slots=True)
class GangImpact:
    """What an edit costs one running gang: the GPUs it held and keeps, whether it loses its
    guarantee (a guaranteed gang whose cells no longer fit its VC runs on as opportunistic, which any
    guaranteed gang may then preempt), and its pods on hardware the new config does not have (their
    GPUs leave the scheduler's books: the gang is no longer whole). `gone`: none of its GPUs remain."""

    gang: str
    vc: str
    gpus: int
    kept_gpus: int
    loses_guarantee: bool
    lost_pods: tuple[str, ...]
    whole: bool = True  # every member bound; a gang not whole yet is let go, its running pods evicted

    @property
    def gone(self) -> bool:
        return self.kept_gpus == 0

    def text(self) -> str:
        what = []
        if self.loses_guarantee:
            what.append(
                "loses its guarantee: it runs on as opportunistic, preemptible by any guaranteed gang"
            )
        n = len(self.lost_pods)
        named = f"{n} pod{'s' if n > 1 else ''}: {', '.join(self.lost_pods)}"
        if not self.whole:
            what.append(
                "is not whole yet and part of its placement is on hardware the new config does not have:"
                f" it is let go and its running pods are evicted ({named})"
            )
        elif self.kept_gpus < self.gpus:
            what.append(
                f"{'is gone' if self.gone else 'is cut'}: {self.gpus - self.kept_gpus} of its {self.gpus}"
                f" GPUs{f' ({named})' if n else ''} are on hardware the new config does not have"
            )
        return f"gang {self.gang} (VC {self.vc}, {self.gpus} GPUs) " + "; ".join(what)

    def to_dict(self) -> dict[str, object]:
        return {
            "gang": self.gang,
            "vc": self.vc,
            "gpus": self.gpus,
            "keptGpus": self.kept_gpus,
            "losesGuarantee": self.loses_guarantee,
            "lostPods": list(self.lost_pods),
            "whole": self.whole,
        }


@dataclass(slots=True)
class ReconfigureReport:
    kept: list[str] = field(default_factory=list)
    downgraded: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # pods on hardware the new config does not have
    dropped: list[str] = field(default_factory=list)  # preemptions in flight the new config cannot hold
    # running pods of gangs not whole yet whose placement lost hardware: such a gang can never be
    # whole where it was placed, so it is let go and they are evicted (`_let_go`)
    evict: list[str] = field(default_factory=list)
    impacts: list[GangImpact] = field(default_factory=list)  # running gangs that lose something

    @property
    def loses_capacity(self) -> bool:
        """Does a running gang lose GPUs or its guarantee? (What a reload refuses unless confirmed.)"""
        return bool(self.impacts)

    def lines(self) -> list[str]:
        return (
            [f"kept {g}" for g in self.kept]
            + [f"downgraded to opportunistic: {g}" for g in self.downgraded]
            + [f"lost: {x}" for x in self.lost]
            + [f"dropped preemption: {g}" for g in self.dropped]
            + [f"evicted (its gang not whole, its placement's hardware gone): pod {u}" for u in self.evict]
        )


def reconfigure(old: Core, spec: ClusterSpec, now: float) -> tuple[Core, ReconfigureReport]:
    """Build a core for `spec` holding every allocation of `old`. `old` is left untouched."""
    new = Core(spec)
    report = ReconfigureReport()
    for node in new.topo.machines:
        if node in old.topo.node_index:
            bad = old.node_health(node)
            if bad:
                new.set_node_health(node, True, bad_gpus=frozenset(bad))
    new.reservations.windows.update(old.reservations.windows)
    gangs = sorted(old.gangs(), key=lambda g: (-g.request.priority, g.created, g.id))
    preempting = [g for g in gangs if g.phase is GangPhase.PREEMPTING]
    for g in gangs:
        if g.phase is GangPhase.PREEMPTING:
            continue
        pods = _pods_of(old, g)
        new.adopt(g.request, pods, now, evicting=g.evicting)  # an unverified hold stays no one's victim
        adopted = new.gang(g.name)
        if adopted is not None:
            _keep_finished(new, adopted, old, g)
            _keep_lost_at(new, adopted, old, g)
        if g.phase is not GangPhase.BOUND and any(p.node not in new.topo.node_index for p in pods):
            _let_go(new, report, g, pods, adopted, now)
            continue
        _judge(report, g, pods, adopted)
        if adopted is None:
            report.lost.append(f"gang {g.name}: none of its GPUs exist any more")
            continue
        if g.deadline is not None and adopted.deadline is not None:
            new.reservations.touch(adopted).deadline = min(
                adopted.deadline, g.deadline
            )  # a reload does not extend the TTL
        report.lost.extend(h for h in adopted.history if "not in the cluster" in h or "already held" in h)
        if g.downgraded_by is not None and adopted.priority < 0:
            keep_downgraded(new, g.name, g.downgraded_by)  # still lazily preempted: not to be promoted
        if adopted.priority < 0 <= g.priority:
            # as a restart that reads this downgrade back from its record finds it
            mark_downgraded(new, adopted, "reconfiguration")
            report.downgraded.append(g.name)
        else:
            report.kept.append(g.name)
    for g in preempting:  # after its victims: reserved over them again, as a restart restores it
        got = new.restore(g.request, _pods_of(old, g), now, g.deadline)  # no pod of it is bound
        if isinstance(got, str):
            report.dropped.append(g.name)
        else:
            report.kept.append(g.name)
    return new, report


def _pods_of(old: Core, g: Gang) -> list[AdoptedPod]:
    """Where each slot of `g` holds GPUs in `old`, as adoption and restoring read them (a restart
    reads them from the bind info and the reservation objects): its pod, if one is bound, and the
    quota cell type of each GPU."""
    return [
        AdoptedPod(
            s.pod_uid or "",
            old.topo.node_names[s.node],
            tuple(old.topo.gpu_index[x] for x in s.leaves),
            s.pod_name,
            s.key,
            old.quota_cell_types(g, s.leaves),
        )
        for s in g.slots
        if not s.released_early
    ]


def _keep_finished(new: Core, adopted: Gang, old: Core, g: Gang) -> None:
    """A slot whose pod finished stays finished (adopted, it would be an open slot): not counted as
    reserved unbound against its namespace's bound, not open to another pod, and a gang whole
    before the reload stays whole (no TTL, so its running pods are not evicted at its expiry)."""
    done = {
        (old.topo.node_names[s.node], tuple(old.topo.gpu_index[x] for x in s.leaves))
        for s in g.slots
        if s.finished and not s.released_early
    }
    if not done:
        return
    topo = new.topo
    for s in adopted.slots:
        where = (topo.node_names[s.node], tuple(topo.gpu_index[x] for x in s.leaves))
        if s.pod_uid is None and where in done:
            s.finished = True
    if adopted.phase is GangPhase.BOUND:
        adopted.deadline = None


def _keep_lost_at(new: Core, adopted: Gang, old: Core, g: Gang) -> None:
    """Where `g`'s adoption counted a recorded slot lost to another gang (`Gang.lost_at`), on the
    new config's leaves: the slot is still lost (not rebuilt: the adoption counts it from the
    request's pod count), and a member held apart may still rejoin there (`recovery.rejoin`)."""
    topo = old.topo
    for at in g.lost_at:
        leaves = [new.topo.leaf_of(topo.node_names[topo.cell_node[x]], topo.gpu_index[x]) for x in at]
        if len(adopted.lost_at) < adopted.lost and all(x is not None for x in leaves):
            adopted.lost_at.append(tuple(sorted(x for x in leaves if x is not None)))


def _judge(report: ReconfigureReport, old: Gang, pods: list[AdoptedPod], new: Gang | None) -> None:
    """Record what the adoption cost a gang that runs (a gang none of whose pods runs loses nothing)."""
    running = [p for p in pods if p.pod_uid]
    if not running:
        return
    gpus = sum(len(p.gpu_indices) for p in running)
    kept = {s.pod_uid for s in new.slots if s.pod_uid} if new is not None else set()
    kept_gpus = sum(len(s.leaves) for s in new.slots if s.pod_uid) if new is not None else 0
    gone = [p for p in running if p.pod_uid not in kept]
    lost = tuple(p.pod_name or p.pod_uid for p in gone)
    downgraded = new is not None and new.priority < 0 <= old.priority
    if lost or downgraded or kept_gpus < gpus:
        report.impacts.append(GangImpact(old.name, old.request.vc, gpus, kept_gpus, downgraded, lost))


def _let_go(
    new: Core, report: ReconfigureReport, old: Gang, pods: list[AdoptedPod], adopted: Gang | None, now: float
) -> None:
    """A gang not whole yet whose placement lost hardware can never be whole where it was placed:
    it is let go as at its reservation's TTL (all or nothing), its running pods evicted, each
    holding its GPUs until gone where the new config still has them, and it is placed afresh when
    its members come back. Its running pods are what the edit costs it."""
    if adopted is not None:
        keep_until_gone(new, adopted, now)
        release(new, adopted, "its placement lost hardware in a reconfiguration", now)
    running = [p for p in pods if p.pod_uid]
    report.lost.append(f"gang {old.name}: not whole, and part of its placement is gone: let go")
    if running:
        report.evict.extend(p.pod_uid for p in running)
        gpus = sum(len(p.gpu_indices) for p in running)
        lost = tuple(p.pod_name or p.pod_uid for p in running)
        report.impacts.append(GangImpact(old.name, old.request.vc, gpus, 0, False, lost, whole=False))
