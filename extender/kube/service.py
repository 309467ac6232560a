"""Kubernetes mode: the scheduler, kept in step with the cluster (`extender.kube.sync.ClusterSync`),
served with what reaches the API server.

The scheduler's helpers come from here too: the binder, the pod and Framework lookups, the evictor
(preemption victims and expired members are deleted, with the UID as precondition), and Events
telling a pod why its gang waits and what happened to it.

With a Lease (`--leader-elect`), every replica lists and watches (its state stays warm) but only the
holder is ready and runs what acts on the cluster: reservation expiry, durable reservations
(`GangReservation` objects, read back when it starts leading), the conventions' timeouts. Without
one, this replica leads from the start.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from config.load import LoadedConfig
from extender.conventions import edge as conventions
from extender.dra.devices import DraSettings
from extender.gangs.bindsig import BindSigner
from extender.gangs.disruption import RESERVATION_EXPIRED, Disruption
from extender.gangs.entitlement import EntitlementError
from extender.gangs.ledger_records import Record, TransitionHook
from extender.gangs.podspec import PodRequest
from extender.http.answers import user_error
from extender.http.app import Service
from extender.http.ledger_api import gang_of_pod, ledger_routes
from extender.http.reload import ConfigWatcher
from extender.http.verbs import Scheduler
from extender.kube import dra_mode, pending
from extender.kube import pods as kpods
from extender.kube.admission_gate import GATE, GateKeeper, HeldPod
from extender.kube.binder import KubeBinder
from extender.kube.client import ApiError, AsyncKube, KubeApi, NoAnswerError, load_api_client, pod_path
from extender.kube.events import REPEAT_SECONDS, EventRecorder, ObjectRef, quoted
from extender.kube.invalid import Invalid
from extender.kube.leader import LeaderElector, LeaseSettings
from extender.kube.node_changes import NodeChanges
from extender.kube.opt_in import UnsignedOptIn
from extender.kube.outside import Held
from extender.kube.recovery_report import RecoveryReport
from extender.kube.requeue import Requeuer
from extender.kube.reservation_sync import ReservationStore
from extender.kube.reviews import DEFAULT_AUDIENCE, KubeAuthority
from extender.kube.start_config import StartConfig
from extender.kube.sync import ClusterSync
from extender.kube.unverified import Unverified
from extender.ops.background import every, expiry_interval
from extender.ops.collector import collector_paused
from extender.ops.logtext import shown
from extender.ops.metrics import Metrics
from topology.core import Core
from topology.reservations import evicted_origin

log = logging.getLogger("topogang.kube")

STANDBY_EXPIRY_LAG = 10.0  # seconds a standby lets a reservation outlive its deadline (watch lag)

FRAMEWORK_TTL = 30.0
NOT_ENTITLED = "NotEntitled"  # Event reason: the pod asks for a VC, pinned cell or priority it may not use
DEFAULT_NAMESPACE = os.environ.get("POD_NAMESPACE", "topogang-system")


def framework_path(namespace: str, name: str) -> str:
    ns, n = quote(namespace, safe=""), quote(name, safe="")
    return f"/apis/frameworkcontroller.microsoft.com/v1/namespaces/{ns}/frameworks/{n}"


def kube_service(
    loaded: LoadedConfig,
    kube: AsyncKube,
    *,
    clock: Callable[[], float] = time.monotonic,
    namespace: str = DEFAULT_NAMESPACE,
    lease: LeaseSettings | None = None,
    identity: str | None = None,
    on_lost: Callable[[], None] | None = None,
    on_config_refused: Callable[[], None] | None = None,
    signing_key: bytes | None = None,
    adopt_unsigned_bind_info: bool = False,
    audience: str = DEFAULT_AUDIENCE,
    dra: DraSettings | None = None,
    freeze_after_recovery: bool = False,
) -> Service:
    """The Kubernetes-mode service over an `AsyncKube` (tests pass a fake one). `namespace` holds the
    extender's own objects (GangReservations, the Lease); `lease` turns on leader election, and
    `on_lost` is called when leadership is lost (the CLI exits, to restart as a clean standby), and
    `on_config_refused` when the start refuses the config (`extender.kube.start_config`; the CLI exits).
    `signing_key` signs every Binding's bind info, and recovery adopts only bind info it signed
    (`extender.gangs.bindsig`); `adopt_unsigned_bind_info` is the admin's opt-in to adopt
    HiveD's at the first start of a switch-over.
    `audience`: the audience of the tokens its readers present (TokenReview; "" for the API
    server's own), `extender.http.doors` says who may read what.
    `dra`: DRA mode, topogang allocating its pods' ResourceClaims (`extender.kube.dra_mode`).
    `freeze_after_recovery`: once the start's recovery is done, what it built (the recovered gangs,
    the ledger) is moved out of the cyclic collector's reach (`gc.freeze`): at 80,000 GPUs in
    bound pods a full collection would otherwise walk it all, ~1-2 s, on whichever call triggers
    it. For a process that lives as long as that state (`topogang serve`), not for tests that
    start many services in one process."""
    extras = loaded.extras
    ttl = float(extras.reservation_ttl_seconds)
    frameworks: dict[tuple[str, str], tuple[float, Mapping[str, Any] | None]] = {}
    instance = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    metrics = Metrics()
    recorder = EventRecorder(kube, metrics, clock=clock, instance=instance)

    async def pod_lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        return await kube.request("GET", pod_path(namespace, name))

    async def framework_lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        now = clock()
        hit = frameworks.get((namespace, name))
        if hit is not None and now - hit[0] < FRAMEWORK_TTL:
            return hit[1]
        try:
            fw = await kube.request("GET", framework_path(namespace, name))
        except (ApiError, NoAnswerError) as err:  # not kept: readable, maybe, at the next filter
            log.warning("cannot read Framework %s/%s: %s", namespace, name, err)
            return None
        frameworks[(namespace, name)] = (now, fw)
        return fw

    def on_wait(pr: PodRequest, text: str) -> None:
        text = text.replace(f"gang {pr.gang} ", f"gang {quoted(pr.gang)} ", 1)  # the tenant's name, quoted
        recorder.record(ObjectRef("Pod", pr.namespace, pr.name, pr.uid), "GangWaiting", text, warning=True)

    def on_invalid(pod: Mapping[str, Any], bad: Invalid) -> None:
        ref = ObjectRef("Pod", kpods.namespace(pod), kpods.name(pod), kpods.uid(pod))
        recorder.record(ref, bad.reason, bad.message(), warning=True)

    with collector_paused():  # the topology model and its arrays: a build that frees nothing
        core = Core(loaded.spec)
    scheduler = Scheduler(
        core,
        KubeBinder(kube),
        metrics=metrics,
        clock=clock,
        namespace_vcs=extras.namespace_virtual_clusters,
        ttl_seconds=ttl,
        pod_lookup=pod_lookup,
        framework_lookup=framework_lookup,
        on_wait=on_wait,
        preempt_on_filter=True,
        conventions=conventions.Conventions(conventions.kube_fetch(kube.request), clock=clock),
    )
    scheduler.not_ready_reason = "connecting to the API server"
    scheduler.entitlement.configure(extras)
    scheduler.vc_queueing = extras.vc_queueing

    def on_refused(pr: PodRequest, err: EntitlementError) -> None:
        text = user_error(pr.key, pr.spec_annotation, err)
        recorder.record(ObjectRef("Pod", pr.namespace, pr.name, pr.uid), NOT_ENTITLED, text, warning=True)

    scheduler.entitlement.on_refused = on_refused
    sync = ClusterSync(scheduler, kube)
    if freeze_after_recovery:
        sync.after_recovery = gc.freeze
    scheduler.promotions.locate.insert(0, sync.live.get)  # every opted-in pod of the cluster, by UID
    sync.on_invalid = on_invalid
    if signing_key is not None:
        scheduler.promotions.signer = sync.signer = BindSigner(signing_key)  # binds and write-backs
        sync.opt_in = UnsignedOptIn(kube, namespace, adopt_unsigned_bind_info)  # spent once, for good
    else:
        log.warning("no bind signing key: bind info read back after a restart is adopted unchecked")

    def on_unverified(u: Unverified) -> None:
        metrics.unverified_pods.inc()
        text = (
            f"topogang: this pod claims GPUs {list(u.gpus)} of {u.node} without a topogang decision "
            f"({u.reason}): they are held, with no quota or priority, until the pod is gone"
        )
        ref = ObjectRef("Pod", u.namespace, u.name, u.uid)
        recorder.record(ref, "BindInfoUnverified", text, warning=True)

    sync.on_unverified = on_unverified

    def on_outside(held: Held) -> None:
        text = (
            f"topogang: this pod is not topogang's and holds {held.gpus} nvidia.com/gpu of {held.node}: "
            "as many of the node's GPUs are kept out of topogang's placements until the pod is gone"
        )
        recorder.record(ObjectRef("Pod", held.namespace, held.name, held.uid), "GpusHeldOutside", text)

    sync.on_outside = on_outside
    reload_hooks: list[Callable[[Core], None]] = []
    dra_holds: list[Callable[[], str]] = []  # why DRA mode may not serve yet
    dra_tasks = (
        dra_mode.attach(scheduler, sync, kube, loaded, dra, recorder, metrics, reload_hooks, dra_holds)
        if dra is not None
        else []
    )

    def may_act() -> bool:
        """Whether this replica may write to the cluster now, asked at each write (`holds`)."""
        return elector is None or elector.holds()

    for binder in {id(b): b for b in (scheduler.binder, scheduler.promotions.annotator)}.values():
        if isinstance(binder, KubeBinder):
            binder.fence = may_act
    sync.retries.may_act = may_act

    async def rejoin_kept(listed: Container[str]) -> None:
        """Drop the kept evictions of gangs the leader no longer lists and made whole (`forget_kept`);
        each such pod, held apart by this replica's own expiry as `<gang>/evicted/<n>`, rejoins its
        gang (`Core.rejoin`): else it would lead with a healthy gang split, a member's slot lost."""
        dropped = sync.retries.forget_kept(listed, store.made_whole)
        if dropped:
            async with scheduler.lock:
                for uid, gang in dropped:
                    if not scheduler.core.rejoin(gang, uid):  # e.g. the gang placed again elsewhere
                        log.info("pod %s stays held apart from gang %s until it is gone", uid, shown(gang))

    # what this replica kept as a standby, looked at once more as its lead begins: the leader's
    # gang whole where it was, its members bound since the standby's last pass
    sync.retries.vet = lambda: rejoin_kept(())

    async def evict(uids: Sequence[str], why: Disruption) -> None:
        """Evictions are the leader's: a standby sees the same reloads and departures, and keeps its
        view only (a start that evicts nothing for it leaves the gang to its reservation's TTL)."""
        for i, uid in enumerate(uids):
            if not may_act():
                if elector is not None and not elector.leading and why.reason == RESERVATION_EXPIRED:
                    # a standby's own expiry (`standby_expiry`): the leader's to do, and done there unless
                    # it died first; kept for this replica's lead, dropped when the watch shows the pod go
                    for later in uids[i:]:
                        held = scheduler.core.gang_of_pod(later)  # `<gang>/evicted/<n>` by now
                        gang = evicted_origin(held.name) if held is not None else None
                        where, at = sync.live.get(later), store.leader_places.get(gang or "")
                        if where is not None and at is not None:  # a gang the leader listed there
                            sync.retries.keep(later, *where, why, gang or "", at)
                return
            await sync.evict([uid], why)

    def evicted(namespace: str, name: str, uid: str, why: Disruption) -> None:
        """What `kubectl describe pod` shows of it: kube-scheduler's `Preempted` for a preemption."""
        reason = "Preempted" if why.preemption else why.reason
        recorder.record(ObjectRef("Pod", namespace, name, uid), reason, why.message(namespace))

    sync.on_evicted = evicted

    scheduler.evictor = sync.evictor = evict
    scheduler.gang_ledger.on_transition = gang_events(recorder)
    gangs = scheduler.conventions
    store = ReservationStore(scheduler, kube, namespace)
    store.may_act = may_act
    own_pod = ObjectRef("Pod", namespace, os.environ.get("POD_NAME", instance))
    start_config = StartConfig(
        loaded,
        evict,
        lambda text: recorder.record(own_pod, "ConfigRejected", text, warning=True),
        on_config_refused,
    )

    async def recovered(report: RecoveryReport) -> None:
        """The start's judgement of the config; a start it let through spends the opt-in."""
        await start_config.judge(report)
        if not start_config.refusal:
            await sync.opt_in.spend()

    sync.on_recovered = recovered

    async def forget_old_events() -> None:
        while True:
            await asyncio.sleep(REPEAT_SECONDS)
            recorder.forget()
            now = clock()
            for fw in [k for k, (t, _) in frameworks.items() if now - t >= FRAMEWORK_TTL]:
                del frameworks[fw]  # re-read on the next lookup anyway; kept, every one would stay

    requeuer = Requeuer(scheduler.requeue, kube, metrics)  # pods turned away, once room frees
    keeper = GateKeeper(scheduler, sync.gated, kube, metrics)  # pods gated at creation, once they may go

    def on_held(held: HeldPod) -> None:
        pr = held.request
        text = (
            f"topogang: gang {pr.gang} waits behind {held.ahead} of VC {pr.request.vc} "
            "(topogang.vcQueueing: StrictFIFO); its pods stay behind the scheduling gate "
            f"{GATE} until that gang is placed or gone"
        )
        recorder.record(ObjectRef("Pod", pr.namespace, pr.name, pr.uid), "QueuedBehindOlderGang", text)

    keeper.on_held = on_held
    leader_tasks = [
        lambda: every(expiry_interval(ttl), scheduler.expire, "reservation expiry"),
        lambda: gangs.run(scheduler),
        store.run,
        requeuer.run,
        keeper.run,
        sync.retries.run,  # evictions that failed, tried again
    ]

    async def standby_expiry() -> None:
        """A standby's reservations expire as the leader's do, `STANDBY_EXPIRY_LAG` later (the
        evictions that follow are the leader's): kept, a gang the leader let go stayed at its old
        placement in the standby's core, and the pods the leader binds when it places the gang again
        read as pods of an earlier placement, held apart as being evicted, which the standby kept
        when it took over. The lag leaves the watch time to show a member the leader bound just
        before the deadline, so the standby does not let go a gang the leader made whole."""

        async def once() -> None:
            if elector is not None and not elector.leading and sync.synced:
                kept = await store.leader_kept()  # the leader's deadlines, not the config's TTL
                if kept is not None:
                    await scheduler.expire(lag=STANDBY_EXPIRY_LAG, before=lambda: store.follow(kept))
                    await rejoin_kept(store.leader_gangs)  # the leader made it whole

        await every(expiry_interval(ttl), once, "a standby's reservation expiry")

    # the Lease is judged against other processes: real time, whatever clock the scheduler runs on
    elector = LeaderElector(kube, lease, instance, clock=time.monotonic) if lease is not None else None

    failed = [""]  # why this replica gave up (its lead's work, a background task), for good

    def hold_reason() -> str:
        if failed[0]:
            return failed[0]
        if start_config.reason:
            return start_config.reason
        if elector is not None and not elector.leading:
            return f"standby: the Lease is held by {elector.holder or 'nobody yet'}"
        if not store_ready[0]:
            return "restoring persisted gang reservations"
        return next((why for hold in dra_holds if (why := hold())), "")

    store_ready = [False]
    sync.hold_reason = hold_reason

    async def serve_as_leader() -> None:
        """Read the reservations back and run the leader's tasks, which never end: one that fails
        ends the lead (`lead`), as a leader running without it would act on a half-kept state."""
        await sync.synced_event.wait()
        if start_config.refusal:  # never lead on a config the start refused
            await asyncio.Event().wait()
        for line in await _restore_until_done(store, sync.pods.values()):
            log.info("%s", line)
        await pending.recall(scheduler, list(sync.pods.values()))  # the VC order, kept over the change
        store_ready[0] = True
        scheduler.after_change = store.flush_new
        sync.refresh_ready()
        tasks = [asyncio.create_task(fn()) for fn in leader_tasks]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()

    async def lead() -> None:
        """Take the lead (at once without a Lease), then serve as leader while the Lease is renewed
        from the moment it is taken (the start, reading every reservation back, may outlast a
        Lease); give up everything when the Lease is lost or the leader's work fails."""
        if elector is not None:
            await elector.acquire(on_wait=sync.refresh_ready)
            metrics.leader.set(1)
        holding = asyncio.create_task(elector.hold() if elector is not None else asyncio.Event().wait())
        serving = asyncio.create_task(serve_as_leader())
        try:
            await asyncio.wait((holding, serving), return_when=asyncio.FIRST_COMPLETED)
            if serving.done() and not serving.cancelled() and serving.exception() is not None:
                log.error("the leader's work failed: giving the lead up", exc_info=serving.exception())
        finally:
            for t in (holding, serving):
                t.cancel()
            metrics.leader.set(0)
            scheduler.after_change = None
        if elector is None or elector.leading:  # the work failed, not the Lease
            failed[0] = "the leader's work failed (logged)"
        if elector is not None:
            await elector.release()  # a standby takes over now (nothing when no longer leading)
        scheduler.ready = False
        scheduler.not_ready_reason = failed[0] or "lost the Lease"
        if on_lost is not None:
            on_lost()

    def on_failed() -> None:
        """A background task ended on an exception (logged by the app): go as a lost lead goes."""
        failed[0] = "a background task failed (logged)"
        if elector is not None:
            elector.leading = False  # no eviction from here on; the Lease lapses for a standby
        sync.refresh_ready()
        if on_lost is not None:
            on_lost()

    async def step_down() -> None:
        """A clean shutdown: first leave the GangReservation objects as the core has them (a gang
        released since the last sync would otherwise come back, memberless, at the next start and
        hold its cells until its TTL), then hand the Lease over."""
        if store_ready[0] and (elector is None or elector.leading):
            try:
                await store.sync()
            except Exception:
                log.exception("the last sync of gang reservations failed")
        if elector is not None:
            await elector.release()

    def on_reload(result: str, errors: list[str]) -> None:
        if result == "applied":
            recorder.record(own_pod, "ConfigApplied", f"config {loaded.file} applied")
        else:
            text = f"config {loaded.file} {result}, the running one stays in force: " + "; ".join(errors)
            recorder.record(own_pod, "ConfigRejected", text, warning=True)

    nodes = len(scheduler.core.node_names())
    watcher = ConfigWatcher(scheduler, loaded.file, clock=clock)
    watcher.on_result = on_reload
    watcher.on_applied = NodeChanges(sync, reload_hooks).reconfigured
    authority = KubeAuthority(
        kube,
        audience=audience,
        clock=clock,
        locate=sync.live.get,
        fetch_pod=pod_lookup,
        gang_of=lambda pod: gang_of_pod(scheduler.gang_ledger, pod),
    )

    async def fetch_framework(ns: str, name: str) -> dict[str, Any] | None:
        async with authority.sending:  # a reader's call: never many ahead of the verbs' (`reviews`)
            return await kube.request("GET", framework_path(ns, name))

    return Service(
        scheduler=scheduler,
        background=[sync.run, lead, standby_expiry, forget_old_events, watcher.run, *dra_tasks],
        on_stop=[step_down],
        routes=[
            watcher.route(),
            *ledger_routes(scheduler, fetch_framework=fetch_framework),
        ],
        pod_source=sync.known_pod,
        on_failed=on_failed,
        description=f"topogang extender on {loaded.file} ({nodes} nodes) against the Kubernetes API"
        + (f", leader election on Lease {namespace}/{lease.name}" if lease is not None else ""),
        authority=authority,
    )


async def _restore_until_done(store: ReservationStore, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Read the persisted reservations back; the API may be briefly unreachable at a fail-over."""
    backoff = 1.0
    while True:
        try:
            return await store.restore(list(pods))
        except NoAnswerError as err:
            log.warning("reading gang reservations failed (%s); retrying in %.0fs", err, backoff)
        except ApiError as err:
            if err.status == 404:  # the GangReservation CRD is not installed: nothing to restore
                log.warning("no GangReservation API (%s): reservations are kept in memory only", err)
                return []
            log.warning("reading gang reservations failed (%s); retrying in %.0fs", err, backoff)
        await asyncio.sleep(backoff)
        backoff = min(10.0, backoff * 2)


def gang_events(recorder: EventRecorder) -> TransitionHook:
    """A gang's phase changes, told on each member pod (what `kubectl describe pod` shows)."""

    def tell(rec: Record, members: list[tuple[str, str, str]], why: str) -> None:
        phase = rec.phase.value
        text = f"gang {rec.gang} is {phase}" + (f": {why}" if why else "")
        warning = phase in ("Expired", "Broken") or why.startswith("cancelled")
        for ns, name, uid in members:
            recorder.record(ObjectRef("Pod", ns, name, uid), f"Gang{phase}", text, warning=warning)

    return tell


def build_kube_service(
    loaded: LoadedConfig,
    *,
    kubeconfig: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    lease: LeaseSettings | None = None,
    on_lost: Callable[[], None] | None = None,
    on_config_refused: Callable[[], None] | None = None,
    signing_key: bytes | None = None,
    adopt_unsigned_bind_info: bool = False,
    audience: str = DEFAULT_AUDIENCE,
    dra: DraSettings | None = None,
    freeze_after_recovery: bool = False,
) -> Service:
    return kube_service(
        loaded,
        AsyncKube(KubeApi(load_api_client(kubeconfig))),
        namespace=namespace,
        lease=lease,
        on_lost=on_lost,
        on_config_refused=on_config_refused,
        signing_key=signing_key,
        adopt_unsigned_bind_info=adopt_unsigned_bind_info,
        audience=audience,
        dra=dra,
        freeze_after_recovery=freeze_after_recovery,
    )
