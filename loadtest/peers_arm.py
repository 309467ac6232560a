"""One arm of `make bench-peers`: the slice's jobs replayed in compressed time on a live control plane.

The harness plays the users and the jobs' runtime, never the scheduler:
- at each job's (compressed) submit time it creates the job's pods as the arm's system expects them
  (`pods_for`): topogang's spec annotation; Kueue's queue label, pod group and TAS annotation; or
  plain GPU requests for the stock kube-scheduler;
- a pod watch sees every bind; once all of a job's pods are bound the job has started, and each pod
  gets KWOK's completion time: now + the traced run time (what is left of it for a warm job)
  stretched by the simulator's locality model (`simulate.slowdown`) for the placement it got,
  compressed by the slice's factor. GPU indices are the extender's for topogang (its
  `pod-leaf-cell-isolation` annotation) and, for the others, the lowest free ones of the node, as
  the device plugin hands them out (the simulator's kueue-like assumes the same);
- a pod of a running or half-bound job deleted by anyone but the harness is a preemption: the rest
  of the attempt is deleted, the GPU time run so far is lost, and the job is submitted again at
  once under a new name (for Kueue a new pod group, so a new Workload queued by its creation,
  behind the jobs then waiting; a Job's Workload, which outlives its eviction, keeps its place,
  since Kueue orders by eviction time only after a PodsReady timeout or an admission check: the
  simulator's kueue-like does that, `simulate/kueue.py`);
- topogang's pods are guaranteed (priority 0) while their VC's guaranteed jobs leave quota for
  them and otherwise opportunistic (priority -1), as the simulator's topogang decides, and every
  one sets `promoteWhenQuota` as the simulator's requests do; a job still waiting opportunistic
  whose VC has quota for it again is re-submitted guaranteed (nothing of it ran, so nothing is
  lost or counted). The tally of a VC's quota in use
  counts the opportunistic jobs the extender promoted (their bind info re-written onto quota
  cells), as the simulator's does; a guaranteed job refused for quota all the same (the promotion
  not yet written back) is re-submitted opportunistic at once (`_quota_news`). Without the two, a
  user's guaranteed job beyond its VC's quota waited for that quota and, under StrictFIFO, held
  its VC's later guaranteed jobs behind it.

Everything is recorded in trace time (real seconds since the arm's start x the factor) as the
simulator's `JobRecord`s and `Timeline`, so the simulator's metrics apply unchanged. A job's end is
the time its completion was set for (KWOK's own lag, measured and reported, is not the scheduler's);
a job still running when the arm stops keeps that projected end, and a job not started by then is
counted as unstarted.
"""

from __future__ import annotations

import contextlib
import http.client
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from loadtest.kubeapi import KubeHttp, PodWatch, tls_context
from loadtest.peers_cluster import COMPLETE_AT, namespace_of
from loadtest.peers_jobs import Attempt, JobState, gang_log, note_bind_info, on_quota_cells, refused_quota
from loadtest.peers_pods import ISOLATION, RUN_LABEL, pods_for
from loadtest.peers_slice import PeerSlice
from loadtest.simulate.cluster import SimCluster
from loadtest.simulate.engine import JobRecord, RunResult, Timeline
from loadtest.simulate.policies import Placement
from loadtest.simulate.slowdown import Slowdown, spread_level


@dataclass(slots=True)
class ArmOutcome:
    result: RunResult  # the measured jobs' records (warm jobs left out) and the whole cluster's timeline
    unstarted: list[int]
    kwok_lag: list[float]  # seconds from a pod's set completion to KWOK's Succeeded
    real_seconds: float
    resubmitted: int
    errors: list[str]
    pods_created: int
    no_indices: int
    gangs: list[dict[str, Any]] = field(default_factory=list)  # `peers_jobs.gang_log`
    refused: int = 0  # topogang: guaranteed attempts refused quota, re-submitted opportunistic
    pods_bound: int = 0  # pods that got a node, over every attempt


class ArmRun:
    """Replays `sl` on the control plane whose env is `env`, for `arm`."""

    def __init__(
        self,
        arm: str,
        sl: PeerSlice,
        cluster: SimCluster,
        slowdown: Slowdown,
        env: Mapping[str, str],
        run: str,
        say: Callable[[str], None] = print,
        writers: int = 4,
    ) -> None:
        self.arm, self.sl, self.cluster, self.slowdown, self.env, self.run = (
            arm,
            sl,
            cluster,
            slowdown,
            env,
            run,
        )
        self.say = say
        self.node_index = {name: i for i, name in enumerate(cluster.node_names)}
        self.free = [list(range(cluster.gpus_per_node)) for _ in range(cluster.nodes)]
        self.used = [0] * cluster.nodes
        self.events: queue.Queue[tuple[str, dict[str, Any], float]] = queue.Queue()
        self.jobs: dict[int, JobState] = {}
        self.by_pod: dict[str, tuple[int, int]] = {}  # pod name -> (job id, attempt number)
        self.pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="bench-peers-api")
        self.local = threading.local()
        self.errors: list[str] = []
        self.kwok_lag: list[float] = []
        self.guaranteed_gpus: dict[str, int] = {}  # topogang: GPUs of each VC's quota in use, as tallied
        self.vc_releases: dict[str, int] = {}  # topogang: how often each VC's tally fell
        self.resubmitted = 0
        self.refused = 0
        self.pods_created = 0
        self.t0 = 0.0
        self.timeline = Timeline((0.0, sl.hours * 3600), 600.0, cluster.total_gpus)
        self.preemptions = 0
        self.no_indices = 0

    # ---------------------------------------------------------------- API writes (worker threads)
    def _api(self) -> KubeHttp:
        api = getattr(self.local, "api", None)
        if api is None:
            api = KubeHttp(int(self.env["API_PORT"]), tls_context(self.env))
            self.local.api = api
        return api

    def _write(self, method: str, path: str, body: object, what: str) -> None:
        def go() -> None:
            try:
                status, doc = self._api().call(method, path, body)
            except OSError as exc:
                self.errors.append(f"{what}: {exc}")
                return
            if status >= 300 and not (method == "DELETE" and status == 404):
                self.errors.append(f"{what}: HTTP {status}: {str(doc)[:200]}")

        self.pool.submit(go)

    def _patch_pod(self, ns: str, name: str, annotations: dict[str, str]) -> None:
        """Merge-patch a pod's annotations; idempotent, so a dropped connection is retried (a
        completion time lost here would keep the pod's GPUs held to the end)."""
        body = orjson.dumps({"metadata": {"annotations": annotations}})
        headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}

        def go() -> None:
            for attempt in range(3):
                api = self._api()
                try:
                    api.conn.request(
                        "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", body=body, headers=headers
                    )
                    resp = api.conn.getresponse()
                    raw = resp.read()
                except (OSError, http.client.HTTPException) as exc:
                    api.conn.close()
                    api.conn = api._connect()
                    if attempt == 2:
                        self.errors.append(f"annotate {ns}/{name}: {exc}")
                    continue
                if resp.status >= 300 and resp.status != 404:
                    self.errors.append(f"annotate {ns}/{name}: HTTP {resp.status}: {raw[:200]!r}")
                return

        self.pool.submit(go)

    # ---------------------------------------------------------------- time
    def trace_now(self, real: float | None = None) -> float:
        return ((time.monotonic() if real is None else real) - self.t0) * self.sl.factor

    def _timeline(self, real: float) -> None:
        self.timeline.advance(self.trace_now(real))
        per = self.cluster.gpus_per_node
        stranded = sum(per - u for u in self.used if 0 < u < per)
        self.timeline.set(sum(self.used), stranded)

    # ---------------------------------------------------------------- submitting
    def _submit(self, st: JobState, real: float, *, opportunistic: bool = False) -> None:
        job = st.job
        guaranteed = True
        if self.arm == "topogang":
            have = self.guaranteed_gpus.get(job.vc, 0)
            guaranteed = not opportunistic and have + job.held_gpus <= self.cluster.quota_gpus(job.vc)
            if guaranteed:
                self.guaranteed_gpus[job.vc] = have + job.held_gpus
        number = len(st.attempts)
        pods = pods_for(self.arm, self.run, job, number, guaranteed)
        att = Attempt(number, guaranteed, [p["metadata"]["name"] for p in pods], submit_real=real)
        att.counted = self.arm == "topogang" and guaranteed
        st.attempts.append(att)
        st.record.queued_at = self.trace_now(real)
        for p in pods:
            self.by_pod[p["metadata"]["name"]] = (job.id, number)
            ns = p["metadata"]["namespace"]
            self._write("POST", f"/api/v1/namespaces/{ns}/pods", p, f"create {ns}/{p['metadata']['name']}")
            self.pods_created += 1

    def _abandon(self, st: JobState, att: Attempt) -> None:
        """Delete what is left of an attempt (pods already gone answer 404)."""
        att.abandoned = True
        ns = namespace_of(st.job.vc)
        for name in att.pods:
            if name in att.done:
                continue
            self._write(
                "DELETE",
                f"/api/v1/namespaces/{ns}/pods/{name}",
                {"gracePeriodSeconds": 0},
                f"delete {ns}/{name}",
            )
        self._release(st, att)
        self._uncount(st, att)

    def _count(self, st: JobState, att: Attempt) -> None:
        """An opportunistic attempt the extender promoted now holds its VC's quota."""
        att.counted = True
        vc = st.job.vc
        self.guaranteed_gpus[vc] = self.guaranteed_gpus.get(vc, 0) + st.job.held_gpus

    def _uncount(self, st: JobState, att: Attempt) -> None:
        """An attempt that held its VC's quota ended (finished, preempted or re-submitted)."""
        if not att.counted:
            return
        att.counted = False
        vc = st.job.vc
        self.guaranteed_gpus[vc] -= st.job.held_gpus
        self.vc_releases[vc] = self.vc_releases.get(vc, 0) + 1

    def _release(self, st: JobState, att: Attempt) -> None:
        for pod in list(att.bound):
            if pod not in att.done:
                att.done.add(pod)
                self._free_pod(st, att, pod)

    def _free_pod(self, st: JobState, att: Attempt, pod: str) -> None:
        n, gpus = att.bound[pod]
        self.used[n] -= st.job.pods[att.pods.index(pod)]
        if gpus is not None and self.arm != "topogang":
            self.free[n] = sorted(self.free[n] + list(gpus))

    # ---------------------------------------------------------------- events
    def on_pod(self, kind: str, pod: dict[str, Any], t: float) -> None:
        self.events.put((kind, pod, t))

    def _handle(self, kind: str, pod: dict[str, Any], real: float) -> None:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name"))
        key = self.by_pod.get(name)
        if key is None:
            return
        st = self.jobs[key[0]]
        att = st.attempts[key[1]]
        if att.abandoned or (st.finished and att is st.current):
            return
        gone = kind == "DELETED" or meta.get("deletionTimestamp") is not None
        phase = (pod.get("status") or {}).get("phase")
        if gone:
            if name in att.done:
                return
            self._preempted(st, att, real)
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if self.arm == "topogang" and self._quota_news(st, att, pod, meta, node, real):
            return
        if node and name not in att.bound:
            self._bound(st, att, name, node, meta, real)
        elif node and att.bound[name][1] is None and self.arm == "topogang":
            gpus = _isolation(meta)
            if gpus is not None:
                n = att.bound[name][0]
                att.bound[name] = (n, gpus)
        if att.start_real is None and len(att.bound) == len(att.pods):
            self._started(st, att, real)
        if phase == "Succeeded" and name not in att.done:
            if att.end_real is not None:
                self.kwok_lag.append(real - att.end_real)
            att.done.add(name)
            if name in att.bound:
                self._free_pod(st, att, name)
            if len(att.done) == len(att.pods):
                st.finished = True
                att.ended = "finished"
                self._uncount(st, att)
            self._timeline(real)

    def _quota_news(
        self, st: JobState, att: Attempt, pod: dict[str, Any], meta: dict[str, Any], node: object, real: float
    ) -> bool:
        """What topogang's pods say of their VC's quota, which the harness's tally follows as the
        simulator's topogang does (`simulate.policies.CorePolicy`): a bound opportunistic pod whose
        bind info the extender re-wrote onto quota cells was promoted, and holds quota from now; a
        guaranteed attempt refused for quota (`[InsufficientQuota]`, its VC's quota held by gangs the
        tally has not seen promoted yet) is re-submitted opportunistic at once, as the simulator
        starts a job opportunistic when its guaranteed try does not fit, and is not re-submitted
        guaranteed before its VC's tally falls again. True: the attempt was re-submitted."""
        if node:
            if not att.counted and on_quota_cells(meta):
                self._count(st, att)
            return False
        if not (att.guaranteed and not att.bound and refused_quota(pod)):
            return False
        att.ended = "refused quota"
        self._abandon(st, att)
        st.refused_at = self.vc_releases.get(st.job.vc, 0)  # its own un-counting is no release
        self.refused += 1
        self._submit(st, real, opportunistic=True)
        return True

    def _bound(
        self, st: JobState, att: Attempt, name: str, node: str, meta: dict[str, Any], real: float
    ) -> None:
        n = self.node_index.get(node)
        if n is None:
            self.errors.append(f"{name} bound to unknown node {node}")
            return
        size = st.job.pods[att.pods.index(name)]
        gpus: tuple[int, ...] | None
        if self.arm == "topogang":
            gpus = _isolation(meta)
            note_bind_info(att, name, meta)
        else:
            gpus = tuple(self.free[n][:size])
            self.free[n] = self.free[n][size:]
        att.bound[name] = (n, gpus)
        self.used[n] += size
        self._timeline(real)

    def _started(self, st: JobState, att: Attempt, real: float) -> None:
        job, rec = st.job, st.record
        now = self.trace_now(real)
        placed = [att.bound[p] for p in att.pods]
        if any(gpus is None for _, gpus in placed):
            self.no_indices += 1  # topogang wrote no GPU indices: the pod's GPUs counted as 0..k-1
        pods = tuple(
            (n, gpus if gpus is not None else tuple(range(job.pods[i]))) for i, (n, gpus) in enumerate(placed)
        )
        run = job.duration
        if not self.slowdown.off:
            run *= self.slowdown.stretch(
                self.cluster, job.held_gpus, spread_level(self.cluster, pods, job.held_gpus)
            )
        att.start_real = real
        att.end_real = real + run / self.sl.factor
        rec.start = now
        if rec.first_start is None:
            rec.first_start = now
        rec.placement = Placement(pods, opportunistic=not att.guaranteed)
        rec.runs += 1
        rec.waited += now - rec.queued_at
        rec.run_seconds = run
        rec.end = now + run
        at = datetime.now(UTC) + timedelta(seconds=att.end_real - time.monotonic())
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        ns = namespace_of(job.vc)
        for p in att.pods:
            self._patch_pod(ns, p, {COMPLETE_AT: stamp})

    def _preempted(self, st: JobState, att: Attempt, real: float) -> None:
        rec = st.record
        att.ended = "preempted" if att.start_real is not None else "deleted before it started"
        if att.start_real is not None:
            rec.preempted += 1
            rec.lost_gpu_seconds += (real - att.start_real) * self.sl.factor * st.job.held_gpus
            self.preemptions += 1
            rec.start = None
            rec.end = None
            rec.placement = None
        self._abandon(st, att)
        self._timeline(real)
        self._submit(st, real)

    def _promote_waiting(self, real: float) -> None:
        """topogang: re-submit guaranteed the opportunistic jobs still waiting whose VC has quota now."""
        for st in self.jobs.values():
            att = st.current
            if st.finished or att.guaranteed or att.bound or att.abandoned:
                continue
            vc = st.job.vc
            if self.guaranteed_gpus.get(vc, 0) + st.job.held_gpus > self.cluster.quota_gpus(vc):
                continue
            if st.refused_at is not None and self.vc_releases.get(vc, 0) <= st.refused_at:
                continue
            att.ended = "resubmitted"
            self._abandon(st, att)
            self.resubmitted += 1
            self._submit(st, real)

    # ---------------------------------------------------------------- the run
    def execute(self) -> ArmOutcome:
        sl = self.sl
        api_port = int(self.env["API_PORT"])
        watch = PodWatch(api_port, tls_context(self.env), f"{RUN_LABEL}={self.run}", self.on_pod)
        order = sorted(sl.jobs, key=lambda j: (j.submit, j.id))
        watch.start()
        self.t0 = time.monotonic()
        nxt = 0
        last_promote = 0.0
        last_say = self.t0
        stop_real = self.t0 + sl.real_seconds(sl.horizon)
        while True:
            real = time.monotonic()
            trace = self.trace_now(real)
            while nxt < len(order) and order[nxt].submit <= trace:
                job = order[nxt]
                nxt += 1
                st = JobState(job, JobRecord(job, queued_at=job.submit))
                self.jobs[job.id] = st
                self._submit(st, real)
            try:
                kind, pod, t = self.events.get(timeout=0.2)
                self._handle(kind, pod, t)
                while True:
                    kind, pod, t = self.events.get_nowait()
                    self._handle(kind, pod, t)
            except queue.Empty:
                pass
            if watch.error is not None:
                raise RuntimeError(f"the pod watch failed: {watch.error!r}")
            if self.arm == "topogang" and real - last_promote > 1.0:
                last_promote = real
                self._promote_waiting(real)
            if real - last_say > 30:
                last_say = real
                running = sum(
                    1 for s in self.jobs.values() if s.current.start_real is not None and not s.finished
                )
                self.say(
                    f"  {self.arm}: trace {trace / 3600:5.1f} h, {nxt}/{len(order)} submitted, "
                    f"{running} running, "
                    f"{sum(s.finished for s in self.jobs.values())} done, {sum(self.used)} GPUs held, "
                    f"{self.preemptions} preemptions"
                )
            if real >= stop_real:
                break
            if nxt == len(order) and all(s.finished for s in self.jobs.values()):
                break
        end = time.monotonic()
        self._timeline(end)
        self.timeline.advance(max(self.trace_now(end), sl.hours * 3600))
        watch.close()
        self.pool.shutdown(wait=True)
        with contextlib.suppress(Exception):
            if getattr(self.local, "api", None) is not None:
                self.local.api.close()
        result = RunResult(self.arm, self.cluster, {}, {}, self.timeline)
        unstarted = []
        for jid, st in sorted(self.jobs.items()):
            if jid in sl.warm:
                continue
            if st.record.start is None:
                unstarted.append(jid)
                continue
            result.records[jid] = st.record
        result.preemptions = self.preemptions
        result.end_time = self.trace_now(end)
        result.wall_seconds = end - self.t0
        result.refusals_tracked = False
        never = [j.id for j in order[nxt:] if j.id not in sl.warm]
        return ArmOutcome(
            result,
            unstarted + never,
            self.kwok_lag,
            end - self.t0,
            self.resubmitted,
            self.errors,
            self.pods_created,
            self.no_indices,
            gang_log(self.jobs, self.cluster, self.sl.warm, self.trace_now),
            self.refused,
            sum(len(att.bound) for st in self.jobs.values() for att in st.attempts),
        )


def _isolation(meta: Mapping[str, Any]) -> tuple[int, ...] | None:
    value = (meta.get("annotations") or {}).get(ISOLATION)
    if not value:
        return None
    try:
        return tuple(int(x) for x in str(value).split(","))
    except ValueError:
        return None
