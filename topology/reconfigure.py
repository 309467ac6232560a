"""Work-preserving reconfiguration: a new core from an edited config, with every running pod kept.

HiveD "reloads" by exiting and rebuilding from pod annotations, losing preemptions in flight. Here a
new core is built beside the old one and every gang is adopted into it where its pods already run:
guaranteed gangs first (highest priority, then oldest), so they keep their VC cells; a gang that no
longer fits its VC keeps running downgraded to opportunistic; pods on hardware that is gone are
reported. Nothing is moved and no GPU is given twice. Preemptions in flight are dropped (nothing runs
in them yet) and reported; kube-scheduler retries them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topology.core import Core
from topology.decisions import AdoptedPod
from topology.reservations import GangPhase
from topology.spec import ClusterSpec


@dataclass(slots=True)
class ReconfigureReport:
    kept: list[str] = field(default_factory=list)
    downgraded: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # pods on hardware the new config does not have
    dropped: list[str] = field(default_factory=list)  # preemptions in flight

    def lines(self) -> list[str]:
        return (
            [f"kept {g}" for g in self.kept]
            + [f"downgraded to opportunistic: {g}" for g in self.downgraded]
            + [f"lost: {x}" for x in self.lost]
            + [f"dropped preemption: {g}" for g in self.dropped]
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
    for g in gangs:
        if g.phase is GangPhase.PREEMPTING:
            report.dropped.append(g.name)
            continue
        pods = [
            AdoptedPod(
                s.pod_uid or "",
                old.topo.node_names[s.node],
                tuple(old.topo.gpu_index[x] for x in s.leaves),
                s.pod_name,
                s.key,
            )
            for s in g.slots
            if not s.released_early
        ]
        new.adopt(g.request, pods, now)
        adopted = new.gang(g.name)
        if adopted is None:
            report.lost.append(f"gang {g.name}: none of its GPUs exist any more")
            continue
        if g.deadline is not None and adopted.deadline is not None:
            adopted.deadline = min(adopted.deadline, g.deadline)  # a reload does not extend the TTL
        report.lost.extend(h for h in adopted.history if "not in the cluster" in h or "already held" in h)
        if adopted.priority < 0 <= g.priority:
            adopted.downgraded_by = "reconfiguration"
            report.downgraded.append(g.name)
        else:
            report.kept.append(g.name)
    return new, report
