"""The soak's invariants, checked against the core and against what the API server shows.

- **No GPU held twice**: among pods bound in the API and not finished (terminating ones included:
  their containers still run), no (node, GPU index) from the bind annotations appears twice.
- **The core and the API agree** (once the extender's pod watch has caught up): every pod the core
  holds a slot for exists, is not finished, and is bound to that slot's node (or its Binding is
  being written); every bound, unfinished pod carrying our bind info is held by the core on the
  same node and GPUs. A GPU in use that the core thinks free is how a double allocation starts.
  No pod holds a slot of a gang of another namespace (`extender.gangs.identity`).
- **No gang partially bound past its reservation**: a gang (one placement, as its members' bind
  info records it) with some members bound and running and others missing stays so for at most
  the reservation TTL plus slack (the expiry sweep's period and a margin), counted from when the
  extender's pod watch has seen it so. The TTL is a cap: members leaving and coming back while
  the gang is not whole do not restart it (`Core.release_pod`), so they do not restart the clock
  here; only a gang seen whole (in the API, or held whole by the extender, whose watch may learn
  of a departure late) starts a new one when it loses a member. An extender restart
  does: recovery keeps the deadline its `GangReservation` object records, but an object not yet
  written (the once-a-second sync) brings the gang back with a fresh TTL.
- **The core's own guarantees**: `topology.invariants.violations`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.gangs.bindinfo import BIND_INFO_ANNOTATIONS, ISOLATION_ANNOTATIONS, BindInfo, pod_bind_info
from extender.gangs.identity import split_key
from extender.gangs.podspec import is_enabled
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from topology.invariants import violations

Obj = Mapping[str, Any]


_decoded: dict[tuple[str | None, ...], BindInfo | None] = {}


def forget_decoded() -> None:
    _decoded.clear()


def bind_info(pod: Obj) -> BindInfo | None:
    """The pod's bind info, decoded once per annotation text (YAML decoding dominates the checks)."""
    ann = kpods.pod_annotations(pod)
    k = tuple(ann.get(a) for a in (*BIND_INFO_ANNOTATIONS, *ISOLATION_ANNOTATIONS))
    if k in _decoded:
        return _decoded[k]
    try:
        info = pod_bind_info(ann)
    except ValueError:
        info = None
    if len(_decoded) > 4096:  # a few hundred pods live at once: enough, and bounded
        _decoded.clear()
    _decoded[k] = info
    return info


def key(pod: Obj) -> str:
    return f"{kpods.namespace(pod)}/{kpods.name(pod)}({kpods.uid(pod)[-6:]})"


def double_held(pods: Iterable[Obj]) -> list[str]:
    """Every (node, GPU) that two unfinished bound pods hold."""
    holder: dict[tuple[str, int], Obj] = {}
    out = []
    for p in pods:
        node = kpods.node_name(p)
        if node is None or kpods.finished(p):
            continue
        info = bind_info(p)
        if info is None:
            continue
        for gpu in info.gpus:
            other = holder.get((node, gpu))
            if other is not None:
                state = " (one of them terminating)" if kpods.deleting(p) or kpods.deleting(other) else ""
                out.append(f"GPU {gpu} of {node} held by {key(other)} and {key(p)}{state}")
            else:
                holder[(node, gpu)] = p
    return out


def core_vs_api(s: Scheduler, pods: Iterable[Obj]) -> list[str]:
    """The core's slots against the API's pods; call only once the pod watch has caught up."""
    out = []
    core = s.core
    by_uid = {kpods.uid(p): p for p in pods}
    for uid, gid in sorted(core.reservations.pod_gang.items()):
        gang = core.reservations.by_id.get(gid)
        slot = gang.slot_of(uid) if gang is not None else None
        if gang is None or slot is None:
            out.append(f"core: pod {uid} maps to gang {gid}, which has no slot for it")
            continue
        slot_node = core.topo.node_names[slot.node]
        p = by_uid.get(uid)
        if p is None:
            out.append(f"core holds GPUs on {slot_node} for pod {uid} (gang {gang.name}), deleted in the API")
        elif kpods.finished(p):
            out.append(f"core holds GPUs on {slot_node} for finished pod {key(p)} (gang {gang.name})")
        elif split_key(gang.name)[0] != kpods.namespace(p):
            out.append(f"core holds pod {key(p)} in gang {gang.name} of another namespace")
        elif kpods.node_name(p) is None:
            if uid not in s.inflight:
                out.append(f"core holds a slot on {slot_node} for unbound pod {key(p)}, no Binding in flight")
        elif kpods.node_name(p) != slot_node:
            out.append(f"core holds pod {key(p)} on {slot_node}, the API has it on {kpods.node_name(p)}")
    for p in by_uid.values():
        node = kpods.node_name(p)
        if node is None or kpods.finished(p) or not is_enabled(p) or node not in core.topo.node_index:
            continue  # (a node the config in force does not describe: its GPUs are no one's to give)
        info = bind_info(p)
        if info is None:
            continue
        uid = kpods.uid(p)
        held = core.reservations.by_id.get(core.reservations.pod_gang.get(uid, -1))
        slot = held.slot_of(uid) if held is not None else None
        what = "terminating pod" if kpods.deleting(p) else "pod"
        if slot is None:
            out.append(f"{what} {key(p)} runs on {node} GPUs {list(info.gpus)}, which the core does not hold")
            continue
        gpus = tuple(sorted(core.topo.gpu_index[x] for x in slot.leaves))
        if (core.topo.node_names[slot.node], gpus) != (node, tuple(sorted(info.gpus))):
            out.append(
                f"{what} {key(p)} runs on {node} GPUs {list(info.gpus)}, the core holds "
                f"{core.topo.node_names[slot.node]} {list(gpus)} for it"
            )
    return out


@dataclass
class PartialGangs:
    """How long each placed gang has been partially bound (see the module docstring).

    The clock of a gang starts at the first check where the extender's pod watch has caught up
    after it was whole (or never seen): a whole gang that loses a member gets a new TTL when the
    extender sees the member go (`Core.release_pod`), which a cut watch delays by its back-off and
    re-list. Members leaving and joining while it is not whole do not restart it."""

    ttl: float
    slack: float
    # per gang: when its clock started, and the members seen then (by UID: between two checks a
    # member may leave and another join, which a count would not notice)
    since: dict[tuple[str, tuple[Any, ...]], tuple[float | None, frozenset[str]]] = field(
        default_factory=dict
    )
    longest: float = 0.0

    def restart(self) -> None:
        """Recovery re-creates an open reservation with a fresh TTL."""
        self.since = {k: (None, m) for k, (_, m) in self.since.items()}

    def check(
        self, pods: Iterable[Obj], now: float, *, watched: bool, whole: frozenset[str] = frozenset()
    ) -> list[str]:
        """`watched`: the extender's pod watch has caught up with every change so far. `whole`: the
        gangs the core holds with every slot claimed. A gang the extender holds whole starts a new
        clock like one seen whole in the API: a member that left while another's Binding was being
        written is seen by the extender only when its watch delivers the deletion (a cut watch's
        back-off and re-list later), and the TTL can only count from what the extender knows."""
        members: dict[tuple[str, tuple[Any, ...]], list[Obj]] = {}
        for p in pods:  # a terminating member still runs, and holds its slot until it is gone
            if kpods.node_name(p) is None or kpods.phase(p) == "Failed":
                continue
            info = bind_info(p)
            if info is None or info.gang is None:
                continue
            shape = tuple((x.node, x.gpus) for x in info.placements)
            members.setdefault((info.gang, shape), []).append(p)
        out = []
        seen = set()
        for k, ms in members.items():
            staying = [p for p in ms if not kpods.succeeded(p) and not kpods.deleting(p)]
            if not staying or len(ms) >= len(k[1]) or k[0] in whole:  # torn down, or whole
                continue
            seen.add(k)
            uids = frozenset(kpods.uid(p) for p in ms)
            since, _before = self.since.get(k, (None, uids))
            if since is None and watched:
                since = now
            self.since[k] = (since, uids)
            if since is None:
                continue
            self.longest = max(self.longest, now - since)
            if now - since > self.ttl + self.slack:
                out.append(
                    f"gang {k[0]} has {len(ms)} of {len(k[1])} members bound for {now - since:.0f}s "
                    f"(reservation TTL {self.ttl:.0f}s)"
                )
        for k in [k for k in self.since if k not in seen]:
            del self.since[k]
        return out


def core_invariants(s: Scheduler) -> list[str]:
    return [f"core: {v}" for v in violations(s.core)]


def bound_requests(s: Scheduler) -> dict[str, tuple[Any, ...]]:
    """Each gang with a bound pod: what its request asks (VC, priority, promotion, members)."""
    return {
        g.name: (g.request.vc, g.request.priority, g.request.promote_when_quota, g.request.members)
        for g in s.core.gangs()
        if any(x.pod_uid is not None for x in g.slots)
        and not g.name.startswith("unverified:")
        and "/evicted/" not in g.name  # an earlier placement's pods, kept until gone: no request of theirs
    }


def restart_kept(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> list[str]:
    """A restart changes no bound gang's request: recovery brings each back as it was decided."""
    return [
        f"gang {name} came back from a restart asking {after[name]}, not {was}"
        for name, was in sorted(before.items())
        if name in after and after[name] != was
    ]
