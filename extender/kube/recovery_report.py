"""What a start's recovery did, and what the config in force cost the gangs that run.

`extender.kube.recovery` fills it in; the sync logs its lines, and the start judges its `costs` as a
hot reload judges its impacts (`extender.kube.start_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from extender.kube.unverified import Unverified


@dataclass
class RecoveryReport:
    gangs: list[str] = field(default_factory=list)
    pods: int = 0
    open_slots: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (pod, why)
    notes: list[str] = field(default_factory=list)
    # pods whose bind info was read without fault: nothing to tell them (`ClusterSync.check`)
    bind_info_read: set[str] = field(default_factory=set)
    unverified: list[Unverified] = field(default_factory=list)  # held, not adopted
    # what the config in force cost the gangs that run, judged at a start as a hot reload judges
    # its impacts: (gang, what of it runs on nodes the config does not have), and the pods to evict
    off_config: list[tuple[str, str]] = field(default_factory=list)
    # pods to evict: of gangs not whole whose placement lost nodes, and of an earlier placement still
    # running (held until gone, and never part of their gang's placement again)
    evict: list[str] = field(default_factory=list)

    def costs(self) -> list[str]:
        """One line per gang the config cost GPUs. (A guaranteed gang that comes back opportunistic
        is in `notes`, not here: a start cannot tell a VC shrunk by the config from a gang that was
        lazily preempted before it, whose bind info still records the quota cells it held.)"""
        return [f"gang {g}: {what}" for g, what in self.off_config]

    def lines(self) -> list[str]:
        out = [
            f"recovered {self.pods} bound pods in {len(self.gangs)} gangs "
            f"({self.open_slots} slots still open)"
        ]
        out += [f"skipped pod {pod}: {why}" for pod, why in self.skipped]
        out += [
            f"pod {u.namespace}/{u.name} on {u.node} GPUs {list(u.gpus)} held without quota or "
            f"priority, not adopted: {u.reason}"
            for u in self.unverified
        ]
        out += self.notes
        return out
