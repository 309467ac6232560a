"""Pods held out of kube-scheduler's queue from their creation until their gang would not only wait
behind an older gang of its VC.

Under `topogang.vcQueueing: StrictFIFO` a gang not yet placed waits `[Queued]` behind the oldest gang
of its VC that waits for room (`extender.gangs.vc_order`). kube-scheduler does not know that: it parks
such a pod as unschedulable and, since an extender's rejection answers Queue to every cluster event,
tries it again on every pod created or deleted anywhere. On `make bench-peers` (a Philly slice on 80
KWOK nodes) 5,707 of the 8,485 failed kube-scheduler attempts of topogang's arm were such `[Queued]`
pods: work for kube-scheduler and for the extender that cannot place anything. Kueue keeps a
Workload's pods behind a scheduling gate until it admits them; this is topogang's counterpart.

The gate is `topogang.io/admission`. The chart's MutatingAdmissionPolicy (`extender.admissionGate`,
off by default; the API is GA and on by default since Kubernetes 1.36) adds it to each pod of
topogang's profile as the API server creates it, and kube-scheduler queues no pod that carries a
scheduling gate. The leader lifts it (`GateKeeper`): a JSON merge patch of `spec.schedulingGates`
without it and the pod's UID as a precondition, so a re-created pod is never touched. No
resourceVersion: kube-scheduler writes a gated pod's status right after its creation, which would
make the first lift a conflict, and a gate can only be removed after creation, so a list that
brought back one another controller removed meanwhile is refused by the API server. A pod stays
gated only while the keeper can say that its filter would answer `[Queued]`: it is opted in, its
request reads as the filter reads it, and `Scheduler.behind` names a gang ahead of it. Every other
pod (another profile's, a bad spec, a namespace not entitled to its VC, `BestEffortFIFO`) has the
gate lifted at once, and the filter answers it as before.

Of the gangs that wait behind nobody, a VC's go in order (highest priority, then oldest, then as the
watch first showed them, which keeps creation order within a `creationTimestamp`'s second) while a
what-if on the core places them one after another (`topology.explain.fits_in_order`, rolled back),
and the first it does not: that one will wait for room and hold the VC's later gangs of its priority
or below back, which then stay gated rather than be lifted together to be answered `[Queued]` at
every cluster event. A gang lifted counts in the what-if until the filter has seen it (placed, or
waiting) or the watch shows a pod of it bound or gone, `FLIGHT_SECONDS` at most. Members of a gang
already placed always go.

When: as soon as the watch shows a gated pod, whenever a gang of some VC stops holding its VC's later
gangs back (`Requeue.vc_moved`, set with `freed_vc`), and every `PASS_SECONDS` (a gang lifted has
been filtered since, or a gang ahead that nobody asks about for a reservation TTL stops holding,
neither with an event here).

Who may cause a lift, on what: only the watch of the API server (a pod it shows with the gate) and the
verbs' own waits; the patch touches only that pod's gates, in the pod's own namespace (RBAC: `patch`
on pods, which the chart's ClusterRole has for promotions and requeues). The gate is a shortcut,
never the boundary: a tenant who removes it from its own pod (pod owners may) is answered `[Queued]`
by the filter; a gate a tenant adds is lifted by the same rule. A held pod's namespace is told why in
an Event (`on_held`), naming the gang ahead only when it is of the pod's own namespace
(`vc_order.shown`). While no extender leads, gated pods wait: that is why the policy is opt-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.gangs.identity import split_key
from extender.gangs.podspec import PodRequest, is_enabled
from extender.gangs.vc_order import Holders
from extender.http import wire
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from extender.kube.client import AsyncKube, patch_pod
from extender.ops.background import wait_at_most
from extender.ops.metrics import Metrics
from topology.decisions import GangRequest, UserError
from topology.explain import fits_in_order

log = logging.getLogger("topogang.kube")

GATE = "topogang.io/admission"
RATE = 100.0  # lifts a second, at most, in bursts of as many: pods kube-scheduler would have had at once
PASS_SECONDS = 1.0  # every gated pod judged again at least this often
FLIGHT_SECONDS = 30.0  # a lifted gang not filtered within this no longer counts in the what-if
# gangs a pass's what-if places at most beyond those in flight: it runs under the verbs' lock, and a
# backlog of thousands would hold the filters; the rest go in the next pass, at once
WHAT_IF_GANGS = 256


def gates(pod: Mapping[str, Any]) -> list[Any]:
    spec = pod.get("spec")
    got = spec.get("schedulingGates") if isinstance(spec, dict) else None
    return got if isinstance(got, list) else []


def gated(pod: Mapping[str, Any]) -> bool:
    """The pod carries topogang's gate, and kube-scheduler may still have to place it."""
    return (
        any(isinstance(g, dict) and g.get("name") == GATE for g in gates(pod))
        and kpods.node_name(pod) is None
        and not kpods.deleting(pod)
    )


def lift_patch(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that lifts the gate and keeps any other: a merge patch writes a list whole."""
    rest = [g for g in gates(pod) if not (isinstance(g, dict) and g.get("name") == GATE)]
    return {"metadata": {"uid": kpods.uid(pod)}, "spec": {"schedulingGates": rest or None}}


class GatedPods:
    """The pods the watch shows with the gate, by UID (`ClusterSync` keeps it from every pod event
    and list, leader or not, so a new leader starts with them); and when a pod the watch showed
    behind a gate not topogang's (its owner's, another controller's) was let in, on the API
    server's clock (`wall`): its gang's place in its VC's queue is no earlier
    (`vc_order.Holders.askable`), or a tenant would buy the head of a shared VC's queue by keeping a
    whole gang out of it, its pods created early, and letting it in later. topogang's own gate
    keeps the pod's creation as its place: the pod was in the queue all along. A let-in time is
    known to the replicas whose watch saw the gate go; one started later (a restart, a rollout)
    has the pod's creation only."""

    def __init__(self, holders: Holders | None = None) -> None:
        # in the order the watch first showed them (a dict keeps it; an update keeps its place):
        # creation order within a creationTimestamp's second, as kube-scheduler's queue takes them
        self.pods: dict[str, Mapping[str, Any]] = {}
        self.wake = asyncio.Event()  # a pod joins, or a VC's holder goes (`Requeue.vc_moved`)
        self.lifted: set[str] = set()  # pods lifted, until the watch shows them bound or gone
        self.landed: set[str] = set()  # of those, the ones it has shown so (the keeper takes them)
        self.wall: Callable[[], float] = time.time if holders is None else holders.wall
        self.held_out: set[str] = set()  # pods seen behind a gate not topogang's
        self.let_in: dict[str, float] = {}  # of those, the ones seen without it since, and when
        if holders is not None:
            holders.askable = self.let_in.get  # a gang let in is queued from then

    def _let_in(self, kind: str, pod: Mapping[str, Any]) -> None:
        uid = kpods.uid(pod)
        if kind == "DELETED":
            self.held_out.discard(uid)
            self.let_in.pop(uid, None)
        elif any(not isinstance(g, dict) or g.get("name") != GATE for g in gates(pod)):
            self.held_out.add(uid)
        elif uid in self.held_out:
            self.held_out.discard(uid)
            self.let_in[uid] = self.wall()

    def saw(self, kind: str, pod: Mapping[str, Any]) -> None:
        self._let_in(kind, pod)
        uid = kpods.uid(pod)
        if uid in self.lifted and (kind == "DELETED" or kpods.node_name(pod) or kpods.finished(pod)):
            self.lifted.discard(uid)
            self.landed.add(uid)
        if kind != "DELETED" and gated(pod):
            if uid not in self.pods:
                self.wake.set()
            self.pods[uid] = kpods.kept(pod)
        else:
            self.pods.pop(uid, None)

    @property
    def seen(self) -> dict[str, int]:
        """Each gated pod's place in the order the watch first showed it."""
        return {uid: i for i, uid in enumerate(self.pods)}

    def listed(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A full list: the gated pods are these, whatever the watch said before."""
        pods = list(pods)
        uids = {kpods.uid(p) for p in pods}
        self.held_out &= uids
        for uid in [u for u in self.let_in if u not in uids]:  # in place: `Holders.askable` reads it
            del self.let_in[uid]
        for p in pods:
            self._let_in("ADDED", p)
        listed = {kpods.uid(p): kpods.kept(p) for p in pods if gated(p)}
        known = {uid: listed[uid] for uid in self.pods if uid in listed}  # their places kept
        self.pods = known | listed
        present = {kpods.uid(p) for p in pods if kpods.node_name(p) is None and not kpods.finished(p)}
        self.landed |= self.lifted - present
        self.lifted &= present
        self.wake.set()


@dataclass(frozen=True, slots=True)
class HeldPod:
    """A pod kept gated, and the gang it waits behind as its own namespace may see it."""

    request: PodRequest
    ahead: str


class GateKeeper:
    """The leader's task: lifts the gate of every gated pod whose filter would not answer `[Queued]`."""

    def __init__(
        self,
        scheduler: Scheduler,
        book: GatedPods,
        kube: AsyncKube,
        metrics: Metrics,
        *,
        rate: float = RATE,
        every: float = PASS_SECONDS,
    ) -> None:
        self.s = scheduler
        self.book = book
        self.kube = kube
        self.metrics = metrics
        self.rate = rate
        self.every = every
        scheduler.requeue.vc_moved = book.wake  # one event wakes the keeper: a pod joins, a VC moves
        self.on_held: Callable[[HeldPod], None] = lambda held: None  # once per pod held
        self._told: set[str] = set()
        # gangs lifted and not yet filtered: when, what they ask, and the pods lifted
        self._in_flight: dict[str, tuple[float, GangRequest, set[str]]] = {}

    async def judge(self) -> tuple[list[Mapping[str, Any]], list[HeldPod]]:
        """The gated pods to lift now, and those held, with the gang each waits behind."""
        lift: list[Mapping[str, Any]] = []
        read: list[tuple[Mapping[str, Any], PodRequest]] = []
        for pod in list(self.book.pods.values()):
            if not is_enabled(pod):
                lift.append(pod)
                continue
            try:
                read.append((pod, await self.s.request_of(wire.parse_pod(pod))))
            except (UserError, wire.WireError):
                lift.append(pod)  # the filter tells the pod what is wrong with it
        held: list[HeldPod] = []
        free: list[tuple[float, Mapping[str, Any], PodRequest]] = []  # behind nobody, by joining time
        async with self.s.lock:
            now = self.s.clock()
            for pod, pr in read:
                self.s.unkept.drop(pr.uid)  # read here only: the verbs keep what they read
                if self.s.core.gang(pr.gang) is not None:  # placed: its members wait behind nobody
                    lift.append(pod)
                elif (ahead := self.s.behind(pr, now)) is None:
                    free.append((self.s.holders.joined(pr, now, self.s.waiting.get(pr.gang)), pod, pr))
                else:
                    held.append(HeldPod(pr, ahead))
            # a stable sort: ties keep the book's order (`GatedPods.pods`), which `free` was read in
            lift += self._within_reach(sorted(free, key=lambda t: (-t[2].request.priority, t[0])), now)
        return lift, held

    def _within_reach(
        self, free: list[tuple[float, Mapping[str, Any], PodRequest]], now: float
    ) -> list[Mapping[str, Any]]:
        """Of the pods behind nobody (highest priority, then oldest gang first: a gang that may preempt
        the ones before it is not kept behind them), those to lift now: a VC's gangs while a what-if
        places them one after another (the gangs lifted and not yet filtered first), and the first it
        does not, which will wait for room and hold the VC's later gangs of its priority or below."""
        going = self._flights(now)
        if not free:  # nothing to lift: a what-if of the gangs in flight alone would decide nothing
            return []
        order = [req for _, req, _ in self._in_flight.values()]
        names = set(going)
        for *_, pr in free:
            if pr.gang not in names:
                if len(names) - len(going) == WHAT_IF_GANGS:
                    self.book.wake.set()  # the rest in the next pass, right after this one's lifts
                    break
                names.add(pr.gang)
                order.append(pr.request)
        stop: dict[str, int] = {}  # VC -> the highest priority of its gangs that will wait
        rules = self.s.entitlement.rules  # a gang its namespace's bound holds back takes nothing
        limits = {r.name: rules.reserve_limit(split_key(r.name)[0]) for r in order}
        for req, fits in zip(order, fits_in_order(self.s.core, order, now, limits), strict=True):
            if req.vc in stop and req.priority <= stop[req.vc]:
                continue
            if req.name not in going:
                self._in_flight[req.name] = (now, req, set())
            if not fits:
                stop[req.vc] = max(stop.get(req.vc, req.priority), req.priority)
        lift = [pod for _, pod, pr in free if pr.gang in self._in_flight]
        for _, _, pr in free:
            if pr.gang in self._in_flight:
                self._in_flight[pr.gang][2].add(pr.uid)
        return lift

    def _flights(self, now: float) -> set[str]:
        """The gangs lifted and not yet filtered: none of them in the core or waiting, none of their
        lifted pods bound or gone since (a short gang may run and end between two passes), and for
        `FLIGHT_SECONDS` at most (kube-scheduler may never send a pod its own filters rule out)."""
        landed = self.book.landed
        for gang, (at, _, uids) in list(self._in_flight.items()):
            done = now - at > FLIGHT_SECONDS or not uids.isdisjoint(landed)
            if done or self.s.core.gang(gang) is not None or gang in self.s.waiting:
                del self._in_flight[gang]
                self.book.lifted -= uids
        landed.clear()
        return set(self._in_flight)

    async def lift(self, pod: Mapping[str, Any]) -> str:
        """Lift one pod's gate; the outcome (`lifted`, `gone`: deleted, re-created, or refused because
        its gates changed since the watch saw it, which brings it back; `failed`)."""
        ns, name = kpods.namespace(pod), kpods.name(pod)
        got = await patch_pod(self.kube, ns, name, lift_patch(pod), "lift the admission gate of")
        return "lifted" if got == "done" else got

    async def run(self) -> None:
        """Judge the gated pods whenever one joins, a VC's holder goes, or `every` seconds pass;
        lift those that may go, `rate` a second at most. A failure to lift is the one pod's; a
        failure to judge lifts them all (the filter still answers `[Queued]` where it must)."""
        burst = max(1, int(self.rate))
        while True:
            self.book.wake.clear()
            try:
                lift, held = await self.judge()
            except Exception:  # a fault here must not keep pods out of kube-scheduler: fail open
                log.exception("admission gate: judging the gated pods failed; lifting every one of them")
                lift, held = list(self.book.pods.values()), []
            self.metrics.admission_gated.set(len(held))
            for h in held:
                if h.request.uid not in self._told:
                    self._told.add(h.request.uid)
                    self.on_held(h)
            self._told.intersection_update(self.book.pods)
            for i, pod in enumerate(lift):
                try:
                    outcome = await self.lift(pod)
                except (OSError, TimeoutError) as exc:  # the API server unreachable for now
                    log.warning("cannot lift the admission gate of pod %s: %s", kpods.uid(pod), exc)
                    outcome = "failed"
                uid = kpods.uid(pod)
                if outcome == "lifted":
                    self.book.lifted.add(uid)
                if outcome != "failed" and self.book.pods.get(uid) is pod:  # not one the watch changed since
                    del self.book.pods[uid]  # lifted (its event confirms it), or gone
                self.metrics.admission_lifts.labels(outcome).inc()
                if (i + 1) % burst == 0:
                    await asyncio.sleep(burst / self.rate)
            with contextlib.suppress(TimeoutError):
                await wait_at_most(self.book.wake.wait(), self.every)
