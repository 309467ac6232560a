"""Rebuild the core's allocations from the pods Kubernetes already runs (after a restart).

Every live, bound pod that opts in carries its decision in its annotations (`extender.gangs.bindinfo`):
its node and GPUs, and its whole gang's placement. Pods are grouped by gang (the same identity the
filter uses), and each gang is re-created in one `Core.adopt` call with every slot of its placement:
slots whose member is not bound yet are adopted under a placeholder and opened again at once, so the
reservation for the missing members survives the restart (and expires after its TTL as usual).

Pods of one gang that record two placements (the gang was placed again while pods of an expired
placement were still terminating) are kept apart: the current placement is restored, and the
earlier one's pods hold their GPUs, as a gang of their own, until they are gone. So are the pods of
a gang that are all being deleted: no reservation comes back for the slots none of them holds.

Pods bound by HiveD (its bind-info and isolation annotations) are adopted the same way, which is how
a cluster moves from HiveD to topogang without draining.

Bind info counts only when `verify` (the extender's `BindSigner`, `extender.gangs.bindsig`) says it
is topogang's own decision. A pod whose bind info is not (forged, edited, HiveD's without the
admin's opt-in) is no member of any gang: its claimed GPUs are held, as a gang of its own named
`unverified:<namespace>/<pod>` (a colon no namespace can hold, so no tenant's gang key meets it)
with no quota cell and no priority, until the pod is gone, so no one else is placed on them; it is
listed in the report for the caller to tell the admin.

In DRA mode (`claimed`, `extender.dra.adopt`), a bound pod whose bind info is missing, unreadable
or not topogang's is adopted from its ResourceClaims' allocations instead, when they are ones
topogang wrote for it: the claims' status is written only by who may update `resourceclaims/status`
(kube-scheduler, the DRA controllers, topogang), never by the pod's owner, and the node's DRA driver
gives the containers those very devices. The pod joins its gang (read from its spec as for any pod)
with the claims' GPUs. A pod whose claims are not taken falls back to what its annotations say.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, replace
from typing import Any

from extender.gangs.bindinfo import (
    ISOLATION_ANNOTATIONS,
    BindInfo,
    PlacedPod,
    decode_isolation,
    pod_bind_info,
)
from extender.gangs.entitlement import EntitlementError
from extender.gangs.identity import gang_key
from extender.gangs.podspec import PodRequest, is_enabled
from extender.kube import pods as kpods
from extender.kube.decided import Entitle, as_decided, from_bind_info, spec_request
from extender.kube.recovery_report import RecoveryReport
from extender.kube.unverified import Unverified, hold_unverified
from topology.core import Core
from topology.decisions import (
    AdoptedPod,
    Member,
    UserError,
    held_no_quota,
)

PLACEHOLDER = "topogang-recovery"
# a pod's bind info -> None when it is topogang's own decision, else why not
Verify = Callable[[Mapping[str, Any]], "str | None"]
# DRA mode: a bound pod -> its claims' GPUs, why they are not taken, or None (no claims)
Claimed = Callable[[Mapping[str, Any]], "tuple[int, ...] | str | None"]


@dataclass(frozen=True, slots=True)
class _Found:
    request: PodRequest
    node: str
    gpus: tuple[int, ...]
    info: BindInfo | None
    deleting: bool = False
    by_claims: bool = False  # no verified record of what was decided: adopted after the gangs with one


def _gpus(pod: Mapping[str, Any], info: BindInfo | None) -> tuple[int, ...]:
    if info is not None:
        return info.gpus
    ann = kpods.pod_annotations(pod)
    for key in ISOLATION_ANNOTATIONS:
        text = ann.get(key)
        if isinstance(text, str) and text.strip():
            return decode_isolation(text)
    raise ValueError("no pod-bind-info or pod-leaf-cell-isolation annotation")


def collect(
    pods: Iterable[Mapping[str, Any]],
    *,
    namespace_vcs: Mapping[str, str] | None = None,
    ttl_seconds: float = 300.0,
    report: RecoveryReport | None = None,
    verify: Verify | None = None,
    claimed: Claimed | None = None,
    entitle: Entitle | None = None,
) -> dict[str, list[_Found]]:
    """Bound, live, opted-in pods grouped by gang name (sorted, so recovery is deterministic). A pod
    whose annotations cannot be read is skipped, with the reason in the report: its annotations are
    its owner's to write, and one such pod must not keep every other gang from being recovered (nor
    the extender from becoming ready)."""
    report = report if report is not None else RecoveryReport()
    groups: dict[str, list[_Found]] = {}
    for pod in pods:
        node = kpods.node_name(pod)
        if node is None or kpods.finished(pod) or not is_enabled(pod) or not kpods.uid(pod):
            continue
        key = f"{kpods.uid(pod)}({kpods.namespace(pod)}/{kpods.name(pod)})"
        why = verify(pod) if verify is not None else None
        if claimed is not None and (why is not None or not _has_bind_info(pod)):
            try:
                found = _from_claims(
                    pod, node, key, claimed, why, namespace_vcs, ttl_seconds, report, entitle
                )
            except Exception as err:  # whatever else the pod's content provokes: this pod only
                report.notes.append(f"pod {key}: its claims cannot be read: {err!r}")
                found = None
            if found is not None:
                groups.setdefault(found.request.gang, []).append(found)
                continue
        if why is not None:
            _unverified(pod, node, key, why, report)
            continue
        try:
            found = _found(pod, node, key, namespace_vcs, ttl_seconds, report, entitle)
        except Exception as err:  # whatever else the pod's content provokes: this pod only
            report.skipped.append((key, f"cannot read it: {err!r}"))
            continue
        if found is not None:
            groups.setdefault(found.request.gang, []).append(found)
    return dict(sorted(groups.items()))


def _has_bind_info(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's annotations say which GPUs it holds (bind info or an isolation annotation)."""
    try:
        info = pod_bind_info(kpods.pod_annotations(pod))
    except ValueError:
        info = None
    try:
        return bool(_gpus(pod, info))
    except ValueError:
        return False


def _from_claims(
    pod: Mapping[str, Any],
    node: str,
    key: str,
    claimed: Claimed,
    why: str | None,
    namespace_vcs: Mapping[str, str] | None,
    ttl_seconds: float,
    report: RecoveryReport,
    entitle: Entitle | None = None,
) -> _Found | None:
    """The pod as its claims place it, or None (its annotations are judged as without claims)."""
    gpus = claimed(pod)
    if gpus is None:
        return None
    if isinstance(gpus, str):
        report.notes.append(f"pod {key}: its ResourceClaims are not taken: {gpus}")
        return None
    try:
        pr = spec_request(pod, namespace_vcs, ttl_seconds)
        pr = entitle(pr, pod, None) if entitle is not None else pr
    except UserError as err:
        what = (
            "its namespace may not ask for it" if isinstance(err, EntitlementError) else "bad scheduling spec"
        )
        report.notes.append(f"pod {key}: its ResourceClaims are not taken: {what} ({err})")
        return None
    bind_info = why or "it has no bind info"
    report.notes.append(f"pod {key}: GPUs {list(gpus)} of {node} taken from its ResourceClaims ({bind_info})")
    deleting = kpods.deleting(pod)
    return _Found(pr, node, gpus, None, deleting, by_claims=True)


def _adoption_order(found: list[_Found]) -> tuple[bool, int]:
    """Verified gangs first, the highest priority first: a gang lazily downgraded before the restart
    still records the quota cells it held then, and must not take them back from its preemptor."""
    return any(f.by_claims for f in found), -max(f.request.request.priority for f in found)


def _unverified(pod: Mapping[str, Any], node: str, key: str, why: str, report: RecoveryReport) -> None:
    """A pod whose bind info is not topogang's decision: the GPUs it claims, to hold."""
    try:
        info = pod_bind_info(kpods.pod_annotations(pod))
    except ValueError:
        info = None
    try:
        gpus = _gpus(pod, info)
    except ValueError as err:
        report.skipped.append((key, f"{why}; and {err}"))
        return
    u = Unverified(kpods.uid(pod), kpods.namespace(pod), kpods.name(pod), node, tuple(sorted(gpus)), why)
    report.unverified.append(u)


def _found(
    pod: Mapping[str, Any],
    node: str,
    key: str,
    namespace_vcs: Mapping[str, str] | None,
    ttl_seconds: float,
    report: RecoveryReport,
    entitle: Entitle | None = None,
) -> _Found | None:
    """One bound pod's request and GPUs, or None (skipped, or held unverified; the reason in the
    report)."""
    try:
        info = pod_bind_info(kpods.pod_annotations(pod))
    except ValueError as err:
        report.notes.append(f"pod {key}: unreadable pod-bind-info ({err}); using its isolation annotation")
        info = None
    if info is not None:
        report.bind_info_read.add(kpods.uid(pod))
    try:
        gpus = _gpus(pod, info)
    except ValueError as err:
        report.skipped.append((key, str(err)))
        return None
    try:
        pr: PodRequest | None = spec_request(pod, namespace_vcs, ttl_seconds)
    except UserError as err:
        pr = from_bind_info(pod, info, ttl_seconds) if info is not None else None
        if pr is None:
            report.skipped.append((key, f"bad scheduling spec ({err}) and no topogang bind info"))
            return None
    assert pr is not None
    if info is not None and info.gang is not None and gang_key(pr.namespace, info.gang) != pr.gang:
        # the spec alone does not name the gang (a FrameworkController task shaped by its
        # Framework object, which recovery does not read): the bind info recorded the gang
        # the pod was placed in, and its whole placement
        pr = from_bind_info(pod, info, ttl_seconds) or pr
    got = as_decided(pod, pr, info, ttl_seconds, entitle)
    if isinstance(got, str):
        _unverified(pod, node, key, got, report)
        return None
    was, kept = pr.request, got.request  # a PriorityClass's priority may settle higher: no edit
    if (kept.vc, kept.promote_when_quota) != (was.vc, was.promote_when_quota) or kept.priority < was.priority:
        report.notes.append(
            f"pod {key}: its spec was edited since its bind; it comes back as its bind info records"
        )
    deleting = kpods.deleting(pod)
    return _Found(got, node, tuple(sorted(gpus)), info, deleting)


def _by_placement(found: list[_Found], has_node: Callable[[str], bool]) -> list[list[_Found]]:
    """The pods of one gang by the placement their bind info records, the current one first. Two
    placements under one name: the gang was placed again while pods of an earlier placement were
    still being evicted, or after a reload took out hardware its pods ran on (the pods there run on
    outside the config, and the gang's other members were placed again). The current one lies
    wholly on the config's nodes, then has the most pods not being deleted."""
    groups: dict[tuple[tuple[str, tuple[int, ...]], ...], list[_Found]] = {}
    loose: list[_Found] = []  # no placement recorded (HiveD isolation only): the current one's
    for f in found:
        if f.info is None or not f.info.placements:
            loose.append(f)
        else:
            key = tuple((p.node, tuple(sorted(p.gpus))) for p in f.info.placements)
            groups.setdefault(key, []).append(f)
    ordered = [
        fs
        for _, fs in sorted(
            groups.items(),
            key=lambda kv: (
                not all(has_node(node) for node, _ in kv[0]),
                -sum(not f.deleting for f in kv[1]),
                -len(kv[1]),
            ),
        )
    ]
    if not ordered:
        return [loose]
    return [ordered[0] + loose, *ordered[1:]]


def _keep_until_gone(core: Core, gang: str, k: int, pods: list[_Found], now: float) -> str:
    """Pods of an earlier placement, being evicted: their GPUs stay held, apart from the gang's
    current placement, until each pod is gone (as `Core.expire` keeps them before a restart). Named
    `recovered-<k>` with the first `k` from `k` on that no gang of the core has: pods recovered one by
    one (a watch event, a node a reload added) each get their own, as a start's list gives each
    earlier placement its own (adopted into another's name, a pod would match no slot, and run on
    GPUs the core thinks free)."""
    while core.gang(name := f"{gang}/evicted/recovered-{k}") is not None:
        k += 1
    sizes: dict[int, int] = {}
    for f in pods:
        sizes[len(f.gpus)] = sizes.get(len(f.gpus), 0) + 1
    members = tuple(Member(n, leaves) for leaves, n in sizes.items())
    req = replace(pods[0].request.request, name=name, members=members, slot_keys=None, suggested_nodes=None)
    recorded = {(p.node, tuple(sorted(p.gpus))): p for p in _record(pods)}
    adopted: list[AdoptedPod] = []
    for f in pods:
        p = recorded.get((f.node, f.gpus))
        gpus, types = (p.gpus, p.preassigned_cell_types) if p is not None else (f.gpus, ())
        adopted.append(AdoptedPod(f.request.uid, f.node, gpus, f.request.name, f.request.slot_key, types))
    core.adopt(req, adopted, now, evicting=True)
    return f"gang {gang}: {len(pods)} pods of an earlier placement keep their GPUs until they are gone"


def recover(
    core: Core,
    pods: Iterable[Mapping[str, Any]],
    *,
    now: float,
    namespace_vcs: Mapping[str, str] | None = None,
    ttl_seconds: float = 300.0,
    verify: Verify | None = None,
    claimed: Claimed | None = None,
    entitle: Entitle | None = None,
) -> RecoveryReport:
    """Adopt every bound gang into `core`; unbound members' slots stay reserved (open). With
    `verify`, only bind info it vouches for is adopted; other bound pods' GPUs are held. With
    `claimed` (DRA mode), a pod without such bind info is adopted from its claims' allocations, after
    every verified gang: its claims prove its GPUs, not the VC and priority its editable spec says."""
    report = RecoveryReport()
    pods = list(pods)
    done = _succeeded_slots(pods, verify)
    groups = collect(
        pods,
        namespace_vcs=namespace_vcs,
        ttl_seconds=ttl_seconds,
        report=report,
        verify=verify,
        claimed=claimed,
        entitle=entitle,
    )
    held = {(f.node, gpu): gang for gang, fs in groups.items() for f in fs for gpu in f.gpus}
    for u in report.unverified:  # no open slot is reserved on what an unverified pod claims...
        for gpu in u.gpus:
            held.setdefault((u.node, gpu), u.gang)
    for gang, everyone in sorted(groups.items(), key=lambda kv: _adoption_order(kv[1])):
        found, *earlier = _by_placement(everyone, core.has_node)
        if all(f.deleting for f in found):  # evicted, or deleted by its user: nothing to reserve
            found, earlier = [], [found, *earlier]
        if found:
            _restore(core, gang, found, now, report, held, done.get(gang, frozenset()))
            # a pod recovered one by one (a watch event, a node a reload added back) whose gang the
            # core has placed again since matches none of its slots: of an earlier placement
            stray = [f for f in found if core.has_node(f.node) and not core.holds_slot(f.request.uid)]
            if stray:
                report.pods -= len(stray)
                earlier = [stray, *earlier]
        for k, group in enumerate(earlier, 1):
            report.notes.append(_keep_until_gone(core, gang, k, group, now))
            report.pods += len(group)
            report.evict += [f.request.uid for f in group if not f.deleting]  # never the gang's again
    for u in report.unverified:  # ...but a claim copied from a running pod takes nothing from it
        hold_unverified(core, u, now)
    return report


def _succeeded_slots(
    pods: Iterable[Mapping[str, Any]], verify: Verify | None
) -> dict[str, Set[tuple[str, tuple[int, ...]]]]:
    """By gang, the slots (node, GPUs) whose pod Succeeded, as its bind info (vouched for by
    `verify`) records them. A slot whose pod came and ran is finished, as before the restart: not
    open to another pod, not counted against its namespace's bound on GPUs reserved unbound, and
    its gang, whole before, gets no TTL (which would evict its running pods at expiry)."""
    out: dict[str, set[tuple[str, tuple[int, ...]]]] = {}
    for pod in pods:
        if not kpods.succeeded(pod) or kpods.node_name(pod) is None or not is_enabled(pod):
            continue
        if verify is not None and verify(pod) is not None:
            continue
        try:
            info = pod_bind_info(kpods.pod_annotations(pod))
        except ValueError:
            continue
        if info is None or info.gang is None:
            continue
        key = gang_key(kpods.namespace(pod), info.gang)
        out.setdefault(key, set()).add((info.node, tuple(sorted(info.gpus))))
    return dict(out)


def _record(found: list[_Found]) -> tuple[PlacedPod, ...]:
    """The gang's placement as its pods' bind info records it (every record lists the same slots).
    Records differ when the gang lost its quota between two binds (a lazy preemption downgraded it):
    a member bound after that records that no quota cell holds the gang, and as a gang never gets
    its quota back, that record is the current one."""
    records = [f.info.placements for f in found if f.info is not None and f.info.placements]
    return max(records, key=_held_no_quota, default=())


def _held_no_quota(placements: tuple[PlacedPod, ...]) -> bool:
    return held_no_quota((p.gpus, p.preassigned_cell_types) for p in placements)


def _restore(
    core: Core,
    gang: str,
    found: list[_Found],
    now: float,
    report: RecoveryReport,
    held: Mapping[tuple[str, int], str],
    done: Set[tuple[str, tuple[int, ...]]] = frozenset(),
) -> None:
    """The gang's current placement: its bound pods in their slots, the other slots reserved, each
    with the quota cell types recorded for its GPUs (how `Core.adopt` rebinds the same VC cells, or
    brings a gang that held none back opportunistic). A recorded slot whose GPUs a bound pod of
    another gang holds is not reserved: HiveD's names were global, so one HiveD group with pods in
    two namespaces comes back as one gang per namespace, each with its own pods."""
    placements = _record(found)
    members = {(f.node, f.gpus): f for f in found}
    adopted: list[AdoptedPod] = []
    placeholders: list[str] = []
    finished: list[str] = []  # slots whose pod Succeeded: they come back finished, not open
    for i, p in enumerate(placements):
        types = p.preassigned_cell_types
        f = members.pop((p.node, tuple(sorted(p.gpus))), None)
        if f is not None:
            key = f.request.slot_key or p.slot_key
            adopted.append(AdoptedPod(f.request.uid, p.node, p.gpus, f.request.name, key, types))
        elif any(held.get((p.node, gpu), gang) != gang for gpu in p.gpus):
            report.notes.append(f"gang {gang}: slot on {p.node} {list(p.gpus)} is held by another gang's pod")
        else:
            uid = f"{PLACEHOLDER}/{gang}/{i}"
            (finished if (p.node, tuple(sorted(p.gpus))) in done else placeholders).append(uid)
            adopted.append(AdoptedPod(uid, p.node, p.gpus, None, p.slot_key, types))
    for f in members.values():  # bound pods the placement does not list (HiveD isolation only)
        adopted.append(AdoptedPod(f.request.uid, f.node, f.gpus, f.request.name, f.request.slot_key))
    request = found[0].request.request
    core.adopt(request, adopted, now)
    for uid in finished:  # first: a gang whole before the restart stays whole (no TTL)
        core.release_pod(uid, now, finished=True)
    for uid in placeholders:
        core.release_pod(uid, now)
    report.gangs.append(gang)
    report.pods += len(found)
    report.open_slots += len(placeholders)
    g = core.gang(gang)
    if g is not None and g.history:
        report.notes += [f"gang {gang}: {h}" for h in g.history]
    _judge(core, gang, found, placements, report)


def _judge(
    core: Core, gang: str, found: list[_Found], placements: tuple[PlacedPod, ...], report: RecoveryReport
) -> None:
    """What the config in force cost the gang (`RecoveryReport.costs`), as a reload would judge it."""
    off = [f for f in found if not core.has_node(f.node)]
    if len(found) < len(placements) and any(not core.has_node(p.node) for p in placements):
        # not whole, and part of its placement is gone: let go as a reload lets it go (all or nothing)
        names = ", ".join(f.request.name for f in found)
        what = (
            f"not whole, and part of its placement is on nodes the config does not have: its pods ({names})"
        )
        report.off_config.append((gang, f"{what} are evicted"))
        report.evict += [f.request.uid for f in found]
    elif off:
        pods = ", ".join(f"{f.request.name} on {f.node}" for f in off)
        report.off_config.append((gang, f"{len(off)} pods run on nodes the config does not have ({pods})"))
    if cut := [f.request.name for f in found if max(f.gpus, default=-1) >= core.node_fill(f.node)[1] > 0]:
        report.off_config.append((gang, f"pods run on GPUs their node lacks in the config: {', '.join(cut)}"))
