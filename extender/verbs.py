"""The four extender verbs against the scheduling core, for one cluster.

`Scheduler` owns the `Core` and serialises every call into it under one asyncio lock (the core is
single-threaded); time comes from an injected clock. I/O never happens under the lock: a bind claims
its slot under the lock, writes the Binding outside it, and gives the slot back if the write fails.

Filter places the whole gang when its first member arrives (`Core.reserve`, with kube-scheduler's
node list as suggested nodes) and answers the nodes of the gang's unclaimed slots that fit this pod.
Prioritize gives 10 to the node of the pod's own slot in rank order (slot key, or FrameworkController
task index) and packs the rest. Bind commits (`Core.claim`, then the Binding). Preempt returns whole
gangs as victims (`Core.preempt`). Filter, prioritize and preempt carry the pod; bind carries only
names, so the pod's request is cached by UID from filter (and read from the API server when missing).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from extender import views, wire
from extender.bindinfo import bind_annotations
from extender.bounded import ByteLRU
from extender.conventions import edge as conventions
from extender.ledger import GangLedger, LedgerCollector
from extender.metrics import Metrics, StateSnapshot
from extender.podspec import PodRequest, is_enabled, pod_request, spec_text
from extender.views import Waiting
from topology.core import Core
from topology.decisions import (
    GangPlacement,
    PodPlacement,
    Preemption,
    Released,
    UserError,
    Wait,
    WaitCode,
)
from topology.reservations import Gang, GangPhase

log = logging.getLogger("topogang.extender")

TENTATIVE_SECONDS = 10.0  # how long a slot stays promised to the pod prioritize pointed at it
POD_CACHE_SIZE = 200_000
POD_CACHE_BYTES = 256 * 1024 * 1024
MAX_SCORE = 10


class VerbError(Exception):
    """A request the verb rejects with an HTTP status (preempt has no Error field)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BindError(Exception):
    """The Binding could not be written; the message says why."""


@dataclass(frozen=True, slots=True)
class BindTarget:
    namespace: str
    name: str
    uid: str


class Binder(Protocol):
    """Writes the Binding (node + annotations) for a pod; idempotent for the same pod and node."""

    async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None: ...


PodLookup = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
FrameworkLookup = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
Evictor = Callable[[Sequence[str], str], Awaitable[None]]
WaitNotifier = Callable[[PodRequest, str], None]


@dataclass(slots=True)
class _Cached:
    request: PodRequest
    spec_key: tuple[int, int] | None  # the spec text it was read from, as (length, hash): not the text


def _text_key(text: str | None) -> tuple[int, int] | None:
    """Which spec text a cached request came from, without keeping the text (up to 64 KiB a pod)."""
    return None if text is None else (len(text), hash(text))


def _cost(pr: PodRequest) -> int:
    """About what a cached request holds: the request and its names, and one key per named slot."""
    keys = pr.request.slot_keys
    return 1024 + len(pr.gang) + 96 * (len(keys) if keys is not None else 0)


def user_error(pod_key: str, annotation: str, err: UserError) -> str:
    """HiveD's user-error wording, naming the pod, the annotation and the field."""
    return f"topogang: User Error: [{pod_key}]: {annotation}: {err.field}: {err.message}"


def wait_text(gang: str, w: Wait) -> str:
    return f"topogang: gang {gang} waits [{w.reason.code.value}]: {w.reason.message}"


PREEMPTION_CODES = (WaitCode.PREEMPTIBLE, WaitCode.PREEMPTING)


def preemption_nodes(w: Wait) -> dict[str, tuple[str, ...]]:
    """The nodes where preemption helps a waiting gang (they go to FailedNodes), with the victims.

    Only nodes that hold victims of the core's plan: the core's `reserve` already searched for a
    preemption plan, so for any other wait no preemption can help. Listing a node without victims
    would make kube-scheduler's dry run fail there ("expected at least one victim pod on node") and
    log an error every cycle, so every other node goes to FailedAndUnresolvableNodes."""
    if w.reason.code not in PREEMPTION_CODES:
        return {}
    return w.victims_by_node()


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
    ) -> None:
        self.core = core
        self.binder = binder
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.namespace_vcs = dict(namespace_vcs or {})
        self.ttl_seconds = ttl_seconds
        self.pod_lookup = pod_lookup
        self.framework_lookup = framework_lookup
        self.evictor = evictor
        self.on_wait = on_wait
        self.preempt_on_filter = preempt_on_filter
        # awaited after filter and preempt: makes new reservations durable before kube-scheduler acts
        self.after_change: Callable[[], Awaitable[None]] | None = None
        self.lock = asyncio.Lock()
        self.ready = False
        self.not_ready_reason = "starting"
        self._pods: ByteLRU[str, _Cached] = ByteLRU(POD_CACHE_BYTES, POD_CACHE_SIZE)
        self._uid_by_name: dict[tuple[str, str], str] = {}
        self._gang_pods: dict[str, set[str]] = {}  # cached pods by gang: who may still claim a slot
        self._waiting: dict[str, Waiting] = {}
        self._tentative: dict[tuple[str, int], tuple[str, float]] = {}
        self._inflight: dict[str, asyncio.Future[str]] = {}
        self.metrics.watch_state(self.snapshot)
        self.gang_ledger = GangLedger(clock=clock)  # what /v1/gangs serves (extender.ledger)
        self.metrics.registry.register(LedgerCollector(self.gang_ledger, lambda: self.core, self.waiting_of))

    # ------------------------------------------------------------------------------ pod requests
    async def request_of(self, pod: wire.WirePod) -> PodRequest:
        """The pod's gang request (cached per UID and spec text). Raises `UserError`."""
        _, text = spec_text(pod.raw)
        if text is None:  # gangs from PodGroups, YuniKorn, Spark, GPU pods (extender.conventions)
            got = await conventions.request_of(self, pod)
            if got is not None:  # not cached: an elastic member or a Soft gang's may change
                self._remember(self._same_identity(got), None)
                return got
        cached = self._pods.get(pod.uid)
        if cached is not None and cached.spec_key == _text_key(text):
            return cached.request
        pr = self._parse(pod, None)
        if pr.task is not None and pr.request.name == f"{pod.namespace}/{pod.name}" and self.framework_lookup:
            fw = await self.framework_lookup(pr.task.namespace, pr.task.framework)
            if fw is None:  # not cached: the Framework may be readable next time
                return self._same_identity(pr)
            pr = self._parse(pod, fw)
        self._remember(self._same_identity(pr), text)
        return pr

    def _same_identity(self, pr: PodRequest) -> PodRequest:
        """A pod that holds a slot keeps the identity it was bound with: a request under its UID
        that names another gang or slot (a reused UID, or a spec edited after binding) is refused,
        and changes nothing, so the holder's cached request and ledger facts stay its own."""
        gang = self.core.gang_of_pod(pr.uid)
        if gang is None:
            return pr
        slot = gang.slot_of(pr.uid)
        held = self.cached(pr.uid)
        if (
            gang.name != pr.gang
            or (slot is not None and slot.leaf_number != pr.leaf_number)
            or (held is not None and held.slot_key != pr.slot_key)
        ):
            raise UserError(
                "metadata.uid",
                f"pod UID {pr.uid} is bound in gang {gang.name}; a bound pod's gang, slot and leaf "
                "cells cannot change (a new spec needs a new pod)",
            )
        return pr

    def _parse(self, pod: wire.WirePod, framework: Mapping[str, Any] | None) -> PodRequest:
        return pod_request(
            pod.raw,
            pod.uid,
            pod.namespace,
            pod.name,
            namespace_vcs=self.namespace_vcs,
            ttl_seconds=self.ttl_seconds,
            framework=framework,
            max_pods=self.core.gpu_count,
        )

    def _remember(self, pr: PodRequest, text: str | None) -> None:
        old = self._pods.get(pr.uid)
        if old is not None and old.request.gang != pr.gang:
            self._unindex(pr.uid, old)
        self._uid_by_name[(pr.namespace, pr.name)] = pr.uid
        self._gang_pods.setdefault(pr.gang, set()).add(pr.uid)
        for uid, gone in self._pods.put(pr.uid, _Cached(pr, _text_key(text)), _cost(pr)):
            self._unindex(uid, gone)

    def forget_pod(self, uid: str) -> None:
        old = self._pods.pop(uid)
        if old is not None:
            self._unindex(uid, old)

    def _unindex(self, uid: str, old: _Cached) -> None:
        if self._uid_by_name.get((old.request.namespace, old.request.name)) == uid:
            del self._uid_by_name[(old.request.namespace, old.request.name)]
        pods = self._gang_pods.get(old.request.gang)
        if pods is not None:
            pods.discard(uid)
            if not pods:
                del self._gang_pods[old.request.gang]

    def cached(self, uid: str) -> PodRequest | None:
        c = self._pods.get(uid)
        return c.request if c is not None else None

    def cached_uids(self) -> list[str]:
        """The UIDs of every pod whose request is cached (least recently used first)."""
        return list(self._pods)

    def _count(self, verb: str, outcome: str) -> None:
        self.metrics.decisions.labels(verb, outcome).inc()

    # ------------------------------------------------------------------------------ filter
    async def filter(self, args: wire.ExtenderArgs) -> dict[str, Any]:
        names = args.names
        if not self.ready:
            self._count("filter", "error")
            return wire.filter_error(f"topogang: not ready: {self.not_ready_reason}")
        if not is_enabled(args.pod.raw):
            self._count("filter", "ignored")
            return wire.filter_result(args, names)
        try:
            pr = await self.request_of(args.pod)
        except UserError as err:
            self._count("filter", "error")
            msg = user_error(args.pod.key, _annotation(args.pod.raw), err)
            self.gang_ledger.user_error(args.pod.raw, args.pod.namespace, None, msg)
            return wire.filter_error(msg)
        seen = self.gang_ledger.seen(pr, args.pod.raw)
        if seen.stale is not None:
            self._count("filter", "rejected")
            stale = f"topogang: pod {pr.key} is of a stale framework attempt: {seen.stale}"
            return wire.filter_result(args, (), {}, dict.fromkeys(names, stale))
        if seen.superseded is not None:
            await self._supersede(seen.superseded, pr.gang)
        index = self.core.node_index()  # once per node list and core (read-only: shared)
        unknown = wire.per_node_list(
            names,
            self.core,
            lambda: {n: f"topogang: node {n} is not in the cluster config" for n in names if n not in index},
        )
        if len(unknown) == len(names):  # nothing to place on: no reservation, no waiting record
            self._count("filter", "rejected")
            return wire.filter_result(args, (), {}, unknown)
        async with self.lock:
            now = self.clock()
            try:
                self.core.validate(pr.request, pr.leaf_number)
                got = self._reserve(pr, names, now)
                if self._should_preempt(got, args.pod.raw):
                    self._preempt_now(pr, names, now)
                    got = self._reserve(pr, names, now)
            except UserError as err:
                self._count("filter", "error")
                msg = user_error(pr.key, pr.spec_annotation, err)
                self.gang_ledger.user_error(args.pod.raw, pr.namespace, pr.gang, msg)
                return wire.filter_error(msg)
            if isinstance(got, Wait):
                self._count("filter", "wait")
                return self._wait_answer(args, pr, got, names, unknown, now)
            self._waiting.pop(pr.gang, None)
            self.gang_ledger.placed(self.core, pr.gang, self.waiting_of)
            slots = self._slots(pr)
            if not slots:
                self._count("filter", "wait")
                holder = self.core.slot_holder(pr.gang, pr.slot_key) if pr.slot_key is not None else None
                taken = (
                    f"slot {pr.slot_key} is held by pod {holder}, which is still alive; this pod waits "
                    "until it is gone"
                    if holder is not None
                    else f"every slot of {pr.leaf_number} leaf cells is claimed by another member"
                )
                text = f"topogang: gang {pr.gang} waits [{WaitCode.RESERVED.value}]: {taken}"
                return wire.filter_result(args, (), {}, {n: unknown.get(n, text) for n in names})
            slot_nodes = {p.node for p in slots}
            at = wire.positions(names)  # the few slot nodes in kube-scheduler's order, no scan
            passed = (
                sorted((n for n in slot_nodes if n in at), key=at.__getitem__)
                if len(at) == len(names)
                else [n for n in names if n in slot_nodes]  # a name given twice: keep both
            )
            self._count("filter", "placed" if passed else "rejected")
            self._promise(pr, slots, now)
            if passed:
                # kube-scheduler reads why nodes failed only when none passes, and counts a dropped,
                # unlisted node as unresolvable (reference: extender protocol, point 5); naming the
                # other 999 nodes of a 1,000-node answer would cost ~140 KB that nobody reads
                return wire.filter_result(args, passed, {}, {})
            other = (
                f"topogang: gang {pr.gang} holds this pod's slot on {_some(sorted(slot_nodes))}, which "
                "kube-scheduler's own filters rejected"
            )
            unresolvable = dict.fromkeys(names, other)
            unresolvable.update(unknown)
            return wire.filter_result(args, (), {}, unresolvable)

    def _should_preempt(self, got: GangPlacement | Wait, pod: Mapping[str, Any]) -> bool:
        """Filter-time preemption (Kubernetes mode): kube-scheduler's own dry run only reaches the
        preempt verb when its in-tree filters see the node full, which pods that request only the
        virtual opt-in resource never make it see. A pod may refuse (`preemptionPolicy: Never`)."""
        if (
            not self.preempt_on_filter
            or not isinstance(got, Wait)
            or got.reason.code is not WaitCode.PREEMPTIBLE
        ):
            return False
        spec = pod.get("spec")
        return not (isinstance(spec, dict) and spec.get("preemptionPolicy") == "Never")

    def _preempt_now(self, pr: PodRequest, names: Sequence[str], now: float) -> None:
        suggested = _narrow(pr, None if pr.ignore_suggested_nodes else wire.node_set(names))
        got = self.core.preempt(replace(pr.request, suggested_nodes=suggested), now)
        if isinstance(got, Preemption):
            victims = [u for us in self._victims(got).values() for u in us]
            self._count("filter", "preempting")
            if victims and self.evictor is not None:
                spawn(self.evictor(victims, f"preempted by gang {pr.gang}"))

    def _reserve(self, pr: PodRequest, names: Sequence[str], now: float) -> GangPlacement | Wait:
        suggested = _narrow(pr, None if pr.ignore_suggested_nodes else wire.node_set(names))
        return self.core.reserve(replace(pr.request, suggested_nodes=suggested), now)

    def _wait_answer(
        self,
        args: wire.ExtenderArgs,
        pr: PodRequest,
        w: Wait,
        names: Sequence[str],
        unknown: Mapping[str, str],
        now: float,
    ) -> dict[str, Any]:
        text = self._note_wait(pr, w, now)
        # the whole reason once; the other nodes say where to find it (kube-scheduler's event groups
        # identical messages, and a 1,000-node answer should not repeat a paragraph 1,000 times)
        short = f"topogang: gang {pr.gang} waits [{w.reason.code.value}] (reason on one node)"
        by_node = w.victims_by_node()
        # with filter-time preemption the extender evicts the victims itself: kube-scheduler's dry
        # run would only find no victims of its own on these nodes and log an error every cycle
        preemptible = {} if self.preempt_on_filter else preemption_nodes(w)
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        first = True
        for n in names:
            if n in unknown:
                unresolvable[n] = unknown[n]
                continue
            msg = text if first else short
            if n in by_node:
                msg = f"topogang: node({n}) has preemptible pods: {_some(by_node[n])}; {msg}"
            first = False
            if n in preemptible:
                failed[n] = msg
            else:
                unresolvable[n] = msg
        return wire.filter_result(args, (), failed, unresolvable)

    def _note_wait(self, pr: PodRequest, w: Wait, now: float) -> str:
        """Remember why the gang waits (for inspect and metrics) and tell the pod's watchers."""
        text = wait_text(pr.gang, w)  # the core's reason says when the gang can never run
        old = self._waiting.get(pr.gang)
        since = old.since if old is not None else now
        self._waiting[pr.gang] = Waiting(
            pr.gang, pr.request.vc, pr.request.priority, pr.request.pod_count, w.reason, since, now
        )
        if old is None or old.reason.code is not w.reason.code:
            self.gang_ledger.touch(self.core, pr.gang, self.waiting_of)
        if self.on_wait is not None:
            self.on_wait(pr, text)
        return text

    def _slots(self, pr: PodRequest) -> list[PodPlacement]:
        """The pod's own claimed slot, else the gang's open slots of its shape (rank order)."""
        gang = self.core.gang(pr.gang)
        if gang is None:
            return []
        mine = gang.slot_of(pr.uid)
        if mine is not None:
            return [p for p in self.core.placement_of(gang).pods if p.slot == mine.index]
        return self.core.open_slots(pr.gang, pr.leaf_number, pr.slot_key)

    def _promise(self, pr: PodRequest, slots: list[PodPlacement], now: float) -> PodPlacement | None:
        """The slot this pod should take (its rank's slot when free), promised to it for a while so
        the next member is steered elsewhere while this one is being bound."""
        if not slots:
            return None
        gang = pr.gang
        for p in slots:
            held = self._tentative.get((gang, p.slot))
            if held is not None and held[0] == pr.uid:
                self._tentative[(gang, p.slot)] = (pr.uid, now)
                return p
        rank = pr.task.index if pr.task is not None else None
        order = list(slots)
        if rank is not None and pr.slot_key is None:
            g = self.core.gang(gang)
            same = [s.index for s in g.slots if s.leaf_number == pr.leaf_number] if g is not None else []
            if rank < len(same):
                order.sort(key=lambda p: (p.slot != same[rank], p.slot))
        choice = order[0]
        for p in order:
            held = self._tentative.get((gang, p.slot))
            if held is None or held[0] == pr.uid or now - held[1] > TENTATIVE_SECONDS:
                choice = p
                break
        self._tentative[(gang, choice.slot)] = (pr.uid, now)
        if len(self._tentative) > 4 * POD_CACHE_SIZE // 10:
            self._tentative = {k: v for k, v in self._tentative.items() if now - v[1] <= TENTATIVE_SECONDS}
        return choice

    # ------------------------------------------------------------------------------ prioritize
    async def prioritize(self, args: wire.ExtenderArgs) -> list[dict[str, Any]]:
        names = args.names
        zero = [(n, 0) for n in names]
        if not self.ready or not is_enabled(args.pod.raw):
            self._count("prioritize", "ignored")
            return wire.host_priorities(zero)
        try:
            pr = await self.request_of(args.pod)
        except UserError:
            self._count("prioritize", "ignored")
            return wire.host_priorities(zero)
        async with self.lock:
            now = self.clock()
            slots = self._slots(pr)
            if not slots:
                self._count("prioritize", "ignored")
                return wire.host_priorities(zero)
            mine = self._promise(pr, slots, now)
            slot_nodes = {p.node for p in slots}
            scores = []
            for n in names:
                if mine is not None and n == mine.node:
                    score = MAX_SCORE
                elif n in slot_nodes:
                    free, total = views.node_fill(self.core, n)
                    score = 1 + round(8 * (1 - free / total)) if total else 1
                else:
                    score = 0
                scores.append((n, score))
        self._count("prioritize", "scored")
        return wire.host_priorities(scores)

    # ------------------------------------------------------------------------------ preempt
    async def preempt(self, args: wire.PreemptionArgs) -> dict[str, Any]:
        if not self.ready:
            self._count("preempt", "error")
            raise VerbError(503, f"topogang: not ready: {self.not_ready_reason}")
        if not is_enabled(args.pod.raw):
            self._count("preempt", "ignored")
            return wire.preemption_result(None)
        try:
            pr = await self.request_of(args.pod)
        except UserError as err:
            self._count("preempt", "error")
            raise VerbError(400, user_error(args.pod.key, _annotation(args.pod.raw), err)) from None
        async with self.lock:
            now = self.clock()
            try:
                self.core.validate(pr.request, pr.leaf_number)
                nodes = None if pr.ignore_suggested_nodes or not args.victims else frozenset(args.victims)
                suggested = _narrow(pr, nodes)
                got = self.core.preempt(replace(pr.request, suggested_nodes=suggested), now)
            except UserError as err:
                self._count("preempt", "error")
                raise VerbError(400, user_error(pr.key, pr.spec_annotation, err)) from None
            if isinstance(got, Wait):
                self._note_wait(pr, got, now)
                self._count("preempt", "none")
                return wire.preemption_result(None)
            if isinstance(got, GangPlacement):
                self._waiting.pop(pr.gang, None)
                self._count("preempt", "none")
                return wire.preemption_result(None)
            victims = self._victims(got)
        if victims and self.evictor is not None:
            uids = [u for us in victims.values() for u in us]
            spawn(self.evictor(uids, f"preempted by gang {pr.gang}"))
        self._count("preempt", "victims" if victims else "none")
        return wire.preemption_result(victims)

    def _victims(self, p: Preemption) -> dict[str, tuple[str, ...]]:
        return {node: uids for node, uids in p.victims_by_node().items() if uids}

    # ------------------------------------------------------------------------------ bind
    async def bind(self, args: wire.BindingArgs) -> dict[str, Any]:
        if not self.ready:
            self._count("bind", "error")
            return wire.binding_result(f"topogang: not ready: {self.not_ready_reason}")
        running = self._inflight.get(args.pod_uid)
        if running is not None:  # a duplicate of a bind still in progress: same answer
            error = await asyncio.shield(running)
            self._count("bind", "duplicate" if not error else "error")
            return wire.binding_result(error)
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[args.pod_uid] = fut
        error = "topogang: the bind did not complete (the request was cancelled)"
        try:
            error = await self._bind(args)
        finally:
            fut.set_result(error)
            del self._inflight[args.pod_uid]
        self._count("bind", "bound" if not error else "error")
        return wire.binding_result(error)

    async def _bind(self, args: wire.BindingArgs) -> str:
        pr = self.cached(args.pod_uid)
        if pr is None:
            got = await self._lookup_for_bind(args)
            if isinstance(got, str):
                return got
            pr = got
        if (pr.namespace, pr.name) != (args.pod_namespace, args.pod_name):
            return (
                f"topogang: pod UID {args.pod_uid} belongs to {pr.namespace}/{pr.name}, "
                f"not {args.pod_namespace}/{args.pod_name}"
            )
        async with self.lock:
            now = self.clock()
            gang = self.core.gang(pr.gang)
            if gang is None:
                return (
                    f"topogang: Pod cannot be bound without a scheduling placement: gang {pr.gang} of "
                    f"{args.key} has no reservation (expired or released); it is placed again at its "
                    "next filter"
                )
            fresh = gang.slot_of(pr.uid) is None
            deadline = gang.deadline  # a claim completing the gang clears it; a failed one restores it
            try:
                decision = self.core.claim(
                    pr.gang,
                    pr.uid,
                    pr.leaf_number,
                    now,
                    node=args.node,
                    slot_key=pr.slot_key,
                    pod_name=pr.name,
                )
            except UserError as err:
                return f"topogang: Pod binding rejected for {args.key}: {err.field}: {err.message}"
            self._tentative.pop((pr.gang, decision.slot), None)
            if fresh:
                self.gang_ledger.binding(self.core, pr.gang, pr.uid, self.waiting_of)
        # from the claim on, any failure gives the slot back: nothing may stay claimed for an unbound pod
        try:
            annotations = bind_annotations(decision, pr.slot_key)
            await self.binder.bind(
                BindTarget(args.pod_namespace, args.pod_name, args.pod_uid), args.node, annotations
            )
            self.gang_ledger.bound(self.core, pr.gang, pr.uid, self.waiting_of)
        except BaseException as exc:
            self.gang_ledger.inflight.discard(pr.uid)
            if fresh:  # a member that never came is no member leaving: the reservation stays as it was
                async with self.lock:
                    if self.core.gang(pr.gang) is gang:
                        self.core.unclaim(pr.gang, pr.uid, self.clock(), deadline=deadline)
                    self.gang_ledger.touch(self.core, pr.gang, self.waiting_of)
            if not isinstance(exc, Exception):
                raise  # cancelled: the slot is back; let the cancellation go on
            log.warning("binding %s to %s failed: %s", args.key, args.node, exc)
            return f"topogang: binding {args.key} to {args.node} failed: {type(exc).__name__}: {exc}"
        return ""

    async def _lookup_for_bind(self, args: wire.BindingArgs) -> PodRequest | str:
        other = self._uid_by_name.get((args.pod_namespace, args.pod_name))
        if self.pod_lookup is None:
            if other is not None:
                return (
                    f"topogang: stale PodUID {args.pod_uid}: pod {args.pod_namespace}/{args.pod_name} "
                    f"was filtered with UID {other}"
                )
            return (
                f"topogang: Pod cannot be bound without a scheduling placement: {args.key} was never "
                "filtered by topogang"
            )
        pod = await self.pod_lookup(args.pod_namespace, args.pod_name)
        if pod is None:
            return f"topogang: pod {args.pod_namespace}/{args.pod_name} does not exist"
        try:
            wp = wire.parse_pod(pod)
        except wire.WireError as err:
            return f"topogang: pod {args.pod_namespace}/{args.pod_name} from the API server: {err}"
        if wp.uid != args.pod_uid:
            return (
                f"topogang: stale PodUID {args.pod_uid}: pod {args.pod_namespace}/{args.pod_name} "
                f"now has UID {wp.uid}"
            )
        if not is_enabled(pod):
            return f"topogang: pod {args.key} does not opt in to topogang (no pod-scheduling-enable limit)"
        status = pod.get("status")
        phase = status.get("phase") if isinstance(status, Mapping) else None
        if phase in ("Succeeded", "Failed"):  # released when it finished: nothing may claim for it
            return f"topogang: pod {args.key} has finished ({phase})"
        try:
            return await self.request_of(wp)
        except UserError as err:
            return user_error(wp.key, _annotation(pod), err)

    # ------------------------------------------------------------------------------ lifecycle
    async def pod_gone(self, uid: str, *, finished: bool = False) -> Released | None:
        """A pod was deleted (or completed): its slot opens, and its gang goes when no member is left."""
        async with self.lock:
            cached = self.cached(uid)
            released = self.core.release_pod(uid, self.clock(), finished=finished)
            if released is None and cached is not None and not finished:
                released = self._abandoned(cached.gang, uid)
            self._released(released)
            if cached is not None and not self._gang_pods.get(cached.gang, set()) - {uid}:
                self._waiting.pop(cached.gang, None)  # its last pod is gone: nothing waits any more
            self.gang_ledger.pod_gone(self.core, uid, self.waiting_of)
        self.forget_pod(uid)
        return released

    def _abandoned(self, gang: str, deleted: str) -> Released | None:
        """The reservation (or preemption) of a gang none of whose pods is bound or known alive any
        more: the job was deleted before it started, so its cells go now rather than at its TTL, and
        victims of its preemption are spared. A pod of it seen later simply places the gang afresh."""
        g = self.core.gang(gang)
        if g is None or any(s.pod_uid is not None or s.finished for s in g.slots):
            return None
        if self._gang_pods.get(gang, set()) - {deleted}:
            return None
        log.info("gang %s: every pod deleted before any was bound; reservation released", gang)
        return self.core.delete_gang(gang)

    async def _supersede(self, old: str, new: str) -> None:
        """A pod of a newer framework attempt arrived: the older attempt's gang goes, and any of its
        pods still holding cells are evicted."""
        async with self.lock:
            released = self.core.evict_gang(old, self.clock())
            self._waiting.pop(old, None)
            self._released(released)
        if released is not None:
            log.info("gang %s is superseded by %s; released", old, new)
            if released.evict_pod_uids and self.evictor is not None:
                spawn(self.evictor(released.evict_pod_uids, f"superseded by framework attempt {new}"))

    def waiting_of(self, gang: str) -> Waiting | None:
        return self._waiting.get(gang)

    def _released(self, released: Released | None) -> None:
        if released is not None:
            self.metrics.releases.labels(released.reason).inc()
            self.gang_ledger.released(self.core, released, self.waiting_of)
            self._tentative = {k: v for k, v in self._tentative.items() if k[0] != released.gang}

    async def expire(self) -> list[Released]:
        """Release reservations past their TTL; evict members already bound to freed cells."""
        async with self.lock:
            now = self.clock()
            released = self.core.expire(now)
            for r in released:
                self._released(r)
            stale = [g for g, w in self._waiting.items() if now - w.last_seen > self.ttl_seconds]
            for g in stale:
                del self._waiting[g]
            # promises past their time bind nothing (`_promise`); the gang of one may have gone
            # inside the core (outbid by a preemptor) without `_released` hearing of it
            self._tentative = {k: v for k, v in self._tentative.items() if now - v[1] <= TENTATIVE_SECONDS}
        if released:
            self.metrics.expiries.inc(len(released))
            for r in released:
                log.info(
                    "reservation of gang %s expired; evicting %d bound members", r.gang, len(r.evict_pod_uids)
                )
        evict = [u for r in released for u in r.evict_pod_uids]
        if evict and self.evictor is not None:
            await self.evictor(evict, "gang reservation expired before all members arrived")
        return released

    async def run_expiry(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire()
            except Exception:
                log.exception("reservation expiry failed")

    # ------------------------------------------------------------------------------ views
    def snapshot(self) -> StateSnapshot:
        core = self.core
        phases: dict[str, int] = {p.value: 0 for p in GangPhase}
        phases["Waiting"] = len(self._waiting)
        for g in core.gangs():
            phases[g.phase.value] = phases.get(g.phase.value, 0) + 1
        usage = views.vc_usage(core)
        for row in usage.values():
            row["free"] = max(0, row["quota"] - row["used"])
        return StateSnapshot(phases, usage, views.level_usage(core), views.cluster_leaves(core), self.ready)

    def affinity_groups(self) -> list[dict[str, Any]]:
        now = self.clock()
        out = [views.affinity_group(self.core, g, now) for g in self.core.gangs()]
        placed = {g.name for g in self.core.gangs()}
        out += [
            views.waiting_group(w, now) for name, w in sorted(self._waiting.items()) if name not in placed
        ]
        return out

    def affinity_group(self, name: str) -> dict[str, Any] | None:
        now = self.clock()
        g: Gang | None = self.core.gang(name)
        if g is not None:
            return views.affinity_group(self.core, g, now)
        w = self._waiting.get(name)
        return views.waiting_group(w, now) if w is not None else None

    def summary(self) -> dict[str, Any]:
        total, free, bad = views.cluster_leaves(self.core)
        snap = self.snapshot()
        return {
            "ready": self.ready,
            "nodes": len(self.core.node_names()),
            "gpus": {"total": total, "free": free, "bad": bad},
            "gangs": snap.gangs_by_phase,
            "virtualClusters": snap.vc_gpus,
        }


def _some(items: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _narrow(pr: PodRequest, nodes: frozenset[str] | None) -> frozenset[str] | None:
    """A request's own suggested nodes (an elastic gang's domain) narrow kube-scheduler's."""
    own = pr.request.suggested_nodes
    if own is None:
        return nodes
    return own if nodes is None else nodes & own


def _annotation(pod: Mapping[str, Any]) -> str:
    return spec_text(pod)[0]


_background: set[asyncio.Task[None]] = set()


def spawn(coro: Awaitable[None]) -> None:
    async def run() -> None:
        try:
            await coro
        except Exception:
            log.exception("background task failed")

    task = asyncio.get_running_loop().create_task(run())
    _background.add(task)
    task.add_done_callback(_background.discard)
