"""The four extender verbs against the scheduling core, for one cluster.

`Scheduler` owns the `Core` and serialises every call into it under one asyncio lock (the core is
single-threaded); time comes from an injected clock. I/O never happens under the lock: a bind claims its slot
under the lock, writes the Binding outside it, and gives the slot back if the write fails.

Each verb asks the core one question and replies with its one answer (`topology.asks`); the ledger and
the promised slots read that answer rather than asking the core again. Filter places the whole gang when
its first member arrives (`Core.filter`, with kube-scheduler's node list as suggested nodes) and answers
the nodes of the gang's unclaimed slots that fit this pod. Prioritize gives 10 to the node of the pod's
own slot in rank order (slot key, or FrameworkController task index) and packs the rest
(`Core.prioritize`). Bind commits (`Core.bind`, then the Binding). Preempt returns whole gangs as victims
(`Core.preempt_member`). Filter, prioritize and preempt carry the pod; bind carries only names (the
request filter read, cached by UID, else the API server's pod). What the config fixes (the cluster's GPU
count, its node names) is read once per core, when it is installed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from extender.conventions.edge import Conventions
from extender.gangs import disruption
from extender.gangs.bindsig import signed_bind_annotations
from extender.gangs.entitlement import Entitlements, Gate
from extender.gangs.ledger import GangLedger
from extender.gangs.ledger_metrics import LedgerCollector
from extender.gangs.ledger_records import Known
from extender.gangs.podspec import PodRequest, annotation_of, is_enabled
from extender.gangs.vc_order import STRICT_FIFO, Holders, VcQueueing
from extender.gangs.waiting import Waiting
from extender.http import filtercall, inflight, letgo, podrequests, replies, versionlock, views, wire
from extender.http.answers import VerbError, slot_rejected, slots_taken, user_error, wait_text, waiting_nodes
from extender.http.nodelists import NodeLists, budget_for
from extender.http.podcache import PodCache
from extender.http.podrequests import may_preempt, member_ask
from extender.http.ports import (
    Binder,
    BindTarget,
    BindUnknownError,
    Evictor,
    FrameworkLookup,
    PodLookup,
    WaitNotifier,
)
from extender.http.promises import Promises
from extender.http.promotions import PromotionWriter, known_names
from extender.http.turned_away import Requeue, TurnedAway, holds_vc
from extender.ops.background import spawn
from extender.ops.metrics import Metrics
from topology.asks import FilterAsk, IdentityError, Slots, Waits
from topology.core import Core
from topology.decisions import GangPlacement, Preemption, Released, UserError, Wait

log = logging.getLogger("topogang.extender")

MAX_SCORE = 10


class Scheduler:
    """One cluster's extender state: the core, the pod cache, the waiting gangs, the binder."""

    def __init__(
        self,
        core: Core,
        binder: Binder,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        namespace_vcs: Mapping[str, str] | None = None,
        ttl_seconds: float = 300.0,
        pod_lookup: PodLookup | None = None,
        framework_lookup: FrameworkLookup | None = None,
        evictor: Evictor | None = None,
        on_wait: WaitNotifier | None = None,
        preempt_on_filter: bool = False,
        conventions: Conventions | None = None,
    ) -> None:
        self.core = core  # and what the config fixes, read once (`_install`)
        self.binder = binder
        self.metrics = metrics or Metrics()
        self._counters: dict[tuple[str, str], Any] = {}
        self.clock = clock
        self.namespace_vcs = dict(namespace_vcs or {})
        self.ttl_seconds = ttl_seconds
        self.pod_lookup = pod_lookup
        self.framework_lookup = framework_lookup
        self.evictor = evictor
        self.on_wait = on_wait
        self.preempt_on_filter = preempt_on_filter
        self.conventions = conventions or Conventions(clock=clock)  # the default reads no API objects
        self.entitlement = Gate(Entitlements.open(self.namespace_vcs))  # who may ask for what
        # awaited after filter and preempt: makes new reservations durable before kube-scheduler acts
        self.after_change: Callable[[], Awaitable[None]] | None = None
        self.lock = versionlock.VersionedLock()  # counts the verbs' changes for the readers (`snapshot`)
        self.ready = False
        self.not_ready_reason = "starting"
        self.pods = PodCache()  # what filter read, for bind (which carries only names)
        self.unkept = podrequests.Unkept()  # read, not cached until the core accepts it
        self.waiting: dict[str, Waiting] = {}
        self.vc_queueing: VcQueueing = STRICT_FIFO  # a VC's gangs in the order they were created
        self.holders = Holders()  # the waits holding their VC's later gangs back (`vc_order`)
        self.promises = Promises()  # slots held for a while for the pod sent to them
        # kube-scheduler's node lists, shared from request to request, within a budget for this cluster
        self.node_lists = NodeLists(budget_for(len(core.node_names())))
        self.inflight: dict[str, asyncio.Future[str]] = {}  # Bindings being written: claimed, not yet done
        self.metrics.watch_state(lambda: views.state_snapshot(self.core, self.waiting, self.ready))
        self.gang_ledger = GangLedger(clock=clock)  # what /v1/gangs serves (extender.gangs.ledger)
        self.metrics.registry.register(LedgerCollector(self.gang_ledger))
        known = known_names(self.pods, self.gang_ledger)  # whom a promotion writes to
        self.promotions = PromotionWriter(binder, known, metrics=self.metrics)
        self.requeue = Requeue()  # pods turned away for lack of room, requeued once room frees

    # ------------------------------------------------------------------------------ the core
    @property
    def core(self) -> Core:
        return self._core

    @core.setter
    def core(self, core: Core) -> None:
        """Install a core (a reload installs a new one) and read what its config fixes."""
        self._core = core
        self.max_pods = core.gpu_count  # no gang of more pods can run: refused as it is read
        self.node_index = core.node_index()  # shared, read-only

    # ------------------------------------------------------------------------------ pod requests
    async def request_of(self, pod: wire.WirePod) -> PodRequest:
        """The pod's gang request (read from the cache per UID and spec text; a fresh read is
        cached by `_keep` once the core accepted it). Raises `UserError`."""
        return await podrequests.read(self, pod)

    def _keep(self, uid: str) -> None:
        self.unkept.keep(self.pods, uid)

    def forget_pod(self, uid: str) -> None:
        self.pods.forget(uid)

    def cached(self, uid: str) -> PodRequest | None:
        return self.pods.get(uid)

    def _count(self, verb: str, outcome: str) -> None:
        child = self._counters.get((verb, outcome))
        if child is None:  # looking a labelled child up takes a lock and a hash: once per pair
            child = self._counters[(verb, outcome)] = self.metrics.decisions.labels(verb, outcome)
        child.inc()

    # ------------------------------------------------------------------------------ filter
    async def filter(self, args: wire.ExtenderArgs) -> dict[str, Any]:
        names = args.names
        if not self.ready:
            self._count("filter", "error")
            return replies.filter_error(f"topogang: not ready: {self.not_ready_reason}")
        if not is_enabled(args.pod.raw):
            self._count("filter", "ignored")
            return replies.filter_result(args, names)
        before = self.pods.get(args.pod.uid)
        try:
            pr = await self.request_of(args.pod)
        except UserError as err:
            self._count("filter", "error")
            msg = user_error(args.pod.key, annotation_of(args.pod.raw), err)
            self.gang_ledger.user_error(args.pod.raw, args.pod.namespace, None, msg)
            return replies.filter_error(msg)
        attempt = self.gang_ledger.attempt(pr, args.pod.raw)
        if attempt.stale is not None:
            if podrequests.moved_away(self, pr) is None:  # a stale attempt's read moves no pod either
                self._keep(pr.uid)
            self._count("filter", "rejected")
            stale = f"topogang: pod {pr.key} is of a stale framework attempt: {attempt.stale}"
            return replies.filter_result(args, (), {}, dict.fromkeys(names, stale))
        index = self.node_index
        unknown = self.node_lists.per_node_list(
            names,
            self.core,
            lambda: {n: f"topogang: node {n} is not in the cluster config" for n in names if n not in index},
        )
        left = podrequests.left_gang(self.pods, before, pr)
        async with self.lock:
            now = self.clock()
            ask = FilterAsk(
                member_ask(pr, self.node_lists.node_set(names)),
                preempt=self.preempt_on_filter and may_preempt(args.pod.raw),
                supersede=attempt.superseded,
                abandon=left,
                place=len(unknown) < len(names),  # nothing to place on: no reservation, no wait
                behind=self.behind(pr, now),
                limit=self.entitlement.rules.reserve_limit(pr.namespace),
            )
            try:
                answer = filtercall.filter_call(self.core, ask, now, self.lock)
            except IdentityError as err:  # the pod's cached request and ledger facts stay its own
                self.unkept.drop(pr.uid)
                self._count("filter", "error")
                msg = user_error(args.pod.key, annotation_of(args.pod.raw), err)
                self.gang_ledger.user_error(args.pod.raw, args.pod.namespace, None, msg)
                return replies.filter_error(msg)
            self._keep(pr.uid)
            self._released(*answer.released)
            if left is not None:
                self._stop_waiting(left)
            self.gang_ledger.seen(pr, args.pod.raw)
            if attempt.superseded is not None:
                self._stop_waiting(attempt.superseded)
                letgo.superseded(self, answer.released, attempt.superseded, pr.gang)
            if answer.error is not None:
                self._count("filter", "error")
                msg = user_error(pr.key, pr.spec_annotation, answer.error)
                self.gang_ledger.user_error(args.pod.raw, pr.namespace, pr.gang, msg)
                return replies.filter_error(msg)
            out = answer.outcome
            if out is None:
                self._count("filter", "rejected")
                return replies.filter_result(args, (), {}, unknown)
            if isinstance(out, Waits):
                if out.preempted is not None:
                    self._preempted(out.preempted, pr.gang, "filter")
                self._count("filter", "wait")
                self.requeue.waits(pr, out)
                return self._wait_answer(args, pr, out, names, unknown, now)
            self._stop_waiting(pr.gang)
            self.gang_ledger.placed(self.core, pr.gang, self.waiting_of, Known(out.gang))
            if not out.slots:  # its slot's holder, or another member, must go first
                self.requeue.turned_away(TurnedAway.of(pr))
                self._count("filter", "wait")
                text = slots_taken(pr.gang, pr.slot_key, out.holder, pr.leaf_number, out.going)
                return replies.filter_result(args, (), {}, {n: unknown.get(n, text) for n in names})
            slot_nodes = {p.node for p in out.slots}
            at = self.node_lists.positions(names)  # the few slot nodes in kube-scheduler's order, no scan
            passed = (
                sorted((n for n in slot_nodes if n in at), key=at.__getitem__)
                if len(at) == len(names)
                else [n for n in names if n in slot_nodes]  # a name given twice: keep both
            )
            self._count("filter", "placed" if passed else "rejected")
            self.requeue.passed(pr.uid)
            self.promises.promise(pr, out, now)
            if passed:
                # kube-scheduler reads why nodes failed only when none passes, and counts a dropped,
                # unlisted node as unresolvable (reference: extender protocol, point 5); naming the
                # other 999 nodes of a 1,000-node answer would cost ~140 KB that nobody reads
                return replies.filter_result(args, passed, {}, {})
            unresolvable = dict.fromkeys(names, slot_rejected(pr.gang, slot_nodes))
            unresolvable.update(unknown)
            return replies.filter_result(args, (), {}, unresolvable)

    def _preempted(self, p: Preemption, gang: str, verb: str) -> dict[str, tuple[str, ...]]:
        """Evict the victims a preemption named (filter-time, or the preempt verb's)."""
        victims = {node: uids for node, uids in p.victims_by_node().items() if uids}
        if verb == "filter":
            self._count("filter", "preempting")
        uids = [u for us in victims.values() for u in us]
        if uids and self.evictor is not None:
            spawn(self.evictor(uids, disruption.preempted_by(gang)))
        return victims

    def _wait_answer(
        self,
        args: wire.ExtenderArgs,
        pr: PodRequest,
        w: Waits,
        names: Sequence[str],
        unknown: Mapping[str, str],
        now: float,
    ) -> dict[str, Any]:
        text = self._note_wait(pr, w.wait, now, Known(w.gang, w.vc_quota))
        failed, unresolvable = waiting_nodes(
            pr.gang, w.wait, text, names, unknown, evicts_itself=self.preempt_on_filter
        )
        return replies.filter_result(args, (), failed, unresolvable)

    def _note_wait(self, pr: PodRequest, w: Wait, now: float, known: Known) -> str:
        """Remember why the gang waits (for inspect, metrics and its VC's order: whether it holds
        its VC's later gangs back) and tell the pod's watchers."""
        text = wait_text(pr.gang, w)  # the core's reason says when the gang can never run
        old = self.waiting.get(pr.gang)
        since = old.since if old is not None else now
        holds = known.vc_quota is not None and holds_vc(w.reason.code, pr.request, known.vc_quota)
        new = Waiting.of(pr, w.reason, since, now, holds, self.holders.joined(pr, now, old))
        self.waiting[pr.gang] = new
        self.holders.note(new, old)
        if old is not None and old.holds and not holds:
            self.requeue.freed_vc(old.vc)  # the gangs queued behind it may go
        if old is None or old.reason.code is not w.reason.code:
            self.gang_ledger.touch(self.core, pr.gang, self.waiting_of, known)
        if self.on_wait is not None:
            self.on_wait(pr, text)
        return text

    # ------------------------------------------------------------------------------ prioritize
    async def prioritize(self, args: wire.ExtenderArgs) -> list[dict[str, Any]]:
        names = args.names
        zero = [(n, 0) for n in names]
        if not self.ready or not is_enabled(args.pod.raw):
            self._count("prioritize", "ignored")
            return replies.host_priorities(zero)
        try:
            pr: PodRequest | None = await self.request_of(args.pod)
        except UserError:
            pr = None
        if pr is None or podrequests.moved_away(self, pr) is not None:
            self._count("prioritize", "ignored")
            return replies.host_priorities(zero)
        async with self.lock:
            now = self.clock()
            try:
                got: Slots | None = self.core.prioritize(member_ask(pr, None))
            except UserError:  # a pod holding a slot as another member: as its read refused
                self.unkept.drop(pr.uid)
                self._count("prioritize", "ignored")
                return replies.host_priorities(zero)
            self._keep(pr.uid)
            if got is None or not got.slots:
                self._count("prioritize", "ignored")
                return replies.host_priorities(zero)
            mine = self.promises.promise(pr, got, now)
            scores = []
            for n in names:
                if mine is not None and n == mine.node:
                    score = MAX_SCORE
                elif n in got.fill:
                    free, total = got.fill[n]
                    score = 1 + round(8 * (1 - free / total)) if total else 1
                else:
                    score = 0
                scores.append((n, score))
        self._count("prioritize", "scored")
        return replies.host_priorities(scores)

    # ------------------------------------------------------------------------------ preempt
    async def preempt(self, args: wire.PreemptionArgs) -> dict[str, Any]:
        if not self.ready:
            self._count("preempt", "error")
            raise VerbError(503, f"topogang: not ready: {self.not_ready_reason}")
        if not is_enabled(args.pod.raw):
            self._count("preempt", "ignored")
            return replies.preemption_result(None)
        try:
            pr = await self.request_of(args.pod)
        except UserError as err:
            self._count("preempt", "error")
            raise VerbError(400, user_error(args.pod.key, annotation_of(args.pod.raw), err)) from None
        if (moved := podrequests.moved_away(self, pr)) is not None:
            self._count("preempt", "error")
            raise VerbError(400, moved)
        async with self.lock:
            now = self.clock()
            try:
                named = frozenset(args.victims) if args.victims else None
                limit = self.entitlement.rules.reserve_limit(pr.namespace)
                answer = self.core.preempt_member(member_ask(pr, named), now, self.behind(pr, now), limit)
            except IdentityError as err:
                self.unkept.drop(pr.uid)
                self._count("preempt", "error")
                raise VerbError(400, user_error(args.pod.key, annotation_of(args.pod.raw), err)) from None
            except UserError as err:
                self._keep(pr.uid)
                self._count("preempt", "error")
                raise VerbError(400, user_error(pr.key, pr.spec_annotation, err)) from None
            self._keep(pr.uid)
            self._released(*answer.released)
            got = answer.got
            if isinstance(got, Wait):
                self._note_wait(pr, got, now, Known(answer.gang, answer.vc_quota))
                self._count("preempt", "none")
                return replies.preemption_result(None)
            if isinstance(got, GangPlacement):
                self._stop_waiting(pr.gang)
                self._count("preempt", "none")
                return replies.preemption_result(None)
            victims = self._preempted(got, pr.gang, "preempt")
        self._count("preempt", "victims" if victims else "none")
        return replies.preemption_result(victims)

    # ------------------------------------------------------------------------------ bind
    async def bind(self, args: wire.BindingArgs) -> dict[str, Any]:
        if not self.ready:
            self._count("bind", "error")
            return replies.binding_result(f"topogang: not ready: {self.not_ready_reason}")
        error, again = await inflight.once(self.inflight, args.pod_uid, lambda: self._bind(args))
        self._count("bind", "error" if error else "duplicate" if again else "bound")
        return replies.binding_result(error)

    async def _bind(self, args: wire.BindingArgs) -> str:
        pr = self.cached(args.pod_uid) or await podrequests.for_bind(self, args)
        if isinstance(pr, str):
            return pr  # why the API server's pod cannot be read or bound
        if (pr.namespace, pr.name) != (args.pod_namespace, args.pod_name):
            return (
                f"topogang: pod UID {args.pod_uid} belongs to {pr.namespace}/{pr.name}, "
                f"not {args.pod_namespace}/{args.pod_name}"
            )
        async with self.lock:
            now = self.clock()
            try:
                claimed = self.core.bind(member_ask(pr, None), args.node, now, pod_name=pr.name)
            except UserError as err:
                self.unkept.drop(pr.uid)
                return f"topogang: Pod binding rejected for {args.key}: {err.field}: {err.message}"
            self._keep(pr.uid)
            if claimed is None:
                return (
                    f"topogang: Pod cannot be bound without a scheduling placement: gang {pr.gang} of "
                    f"{args.key} has no reservation (expired or released); it is placed again at its "
                    "next filter"
                )
            decision, gang = claimed.bind, claimed.gang
            self.promises.claimed(pr.gang, decision.slot)
            if claimed.fresh:
                self.gang_ledger.binding(self.core, pr.gang, pr.uid, self.waiting_of, Known(gang))
        # from the claim on, any failure gives the slot back: nothing may stay claimed for an unbound pod
        try:
            annotations = signed_bind_annotations(self.promotions.signer, decision, pr.slot_key)
            await self.binder.bind(
                BindTarget(args.pod_namespace, args.pod_name, args.pod_uid), args.node, annotations
            )
            self.gang_ledger.bound(self.core, pr.gang, pr.uid, self.waiting_of, Known(gang))
        except BaseException as exc:
            self.gang_ledger.inflight.discard(pr.uid)
            if claimed.fresh and not isinstance(exc, BindUnknownError):  # (unknown: it may run there)
                async with self.lock:
                    if not gang.gone:  # the same reservation: give its slot back
                        self.core.unclaim(pr.gang, pr.uid, self.clock(), deadline=claimed.deadline)
                    self.gang_ledger.touch(self.core, pr.gang, self.waiting_of, Known(gang))
            if not isinstance(exc, Exception):
                raise  # cancelled: the slot is back; let the cancellation go on
            log.warning("binding %s to %s failed: %s", args.key, args.node, exc)
            return f"topogang: binding {args.key} to {args.node} failed: {type(exc).__name__}: {exc}"
        return ""

    # ------------------------------------------------------------------------------ lifecycle
    async def pod_gone(self, uid: str, *, finished: bool = False) -> Released | None:
        """A pod was deleted (or completed): its slot opens, and its gang goes when no member is left."""
        async with self.lock:
            cached = self.cached(uid)
            self.requeue.gone(uid, g.name if (g := self.core.gang_of_pod(uid)) else None, finished=finished)
            released = self.core.release_pod(uid, self.clock(), finished=finished)
            if released is None and cached is not None:  # finished or not: a pod that held no slot
                released = letgo.abandoned(self, cached.gang, uid)
            self._released(released)
            if cached is not None:  # its gang's last pod gone: nothing waits, a softened name is free
                if not self.pods.others_in(cached.gang, uid):
                    self._stop_waiting(cached.gang)
                self.conventions.left(self.core, cached.gang, lambda g: self.pods.others_under(g, uid))
            self.gang_ledger.pod_gone(self.core, uid, self.waiting_of)
        self.forget_pod(uid)
        return released

    def waiting_of(self, gang: str) -> Waiting | None:
        return self.waiting.get(gang)

    def behind(self, pr: PodRequest, now: float) -> str | None:
        """The older gang of the pod's VC its gang waits behind (`vc_order`), under StrictFIFO."""
        if self.vc_queueing != STRICT_FIFO:
            return None
        return self.holders.ahead_of(self.waiting, pr, now, now - self.ttl_seconds, self.entitlement.rules)

    def _stop_waiting(self, gang: str) -> None:
        """The gang no longer waits; if it held its VC's later gangs back, they may go now."""
        if (w := self.waiting.pop(gang, None)) is not None:
            self.holders.drop(gang, w.vc)  # a holder of its VC, or a gang its namespace's bound held
            if w.holds:
                self.requeue.freed_vc(w.vc)

    def _released(self, *released: Released | None) -> None:
        for r in released:
            if r is not None:
                self.requeue.freed()
                self.metrics.releases.labels(r.reason).inc()
                self.gang_ledger.released(self.core, r, self.waiting_of)
                self.promises.drop_gang(r.gang)

    async def expire(self, lag: float = 0.0, before: Callable[[], None] | None = None) -> list[Released]:
        """Release reservations past their TTL (`lag` seconds past it: a standby's, after `before`
        under the lock); evict members already bound to freed cells."""
        async with self.lock:
            if before is not None:
                before()
            now = self.clock() - lag
            released = self.core.expire(now)
            self._released(*released)
            for g in self.gang_ledger.stale_waits(self.waiting, now - self.ttl_seconds):
                self._stop_waiting(g)
            self.promises.expire(now)
            self.gang_ledger.maybe_prune(self.core)  # tombstones and forgotten gangs go, busy or quiet
            promoted = self.promotions.due(self.core)  # promotions made durable, on this periodic pass
        await self.promotions.write(promoted, self.core)
        if released:
            self.metrics.expiries.inc(len(released))
            for r in released:
                log.info("reservation of gang %s expired; evicting %d members", r.gang, len(r.evict_pod_uids))
        evict = [u for r in released for u in r.evict_pod_uids]
        if evict and self.evictor is not None:
            await self.evictor(evict, disruption.reservation_expired())
        return released
