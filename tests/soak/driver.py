"""A bounded soak of the Kubernetes-mode extender, with randomized faults, reproducible by seed.

The real `kube_service` (its `Scheduler`, `ClusterSync`, binder, evictor, expiry sweep, gang
timeouts and event rate limit, started and stopped by the app's own lifespan) runs in-process
against `FakeApiServer`, on a virtual-time event loop (`vclock`), so TTLs elapse without sleeping.
Around it, the driver plays everyone else:

- **kube-scheduler** (`extender.kubesched`'s cycle, over `InProcess`): takes pending pods by
  priority (sometimes out of order), calls filter -> prioritize -> bind (bind in the background,
  as its binding cycle does), backs a pod off after an error, calls preempt when filter names
  nodes where preemption helps, and deletes the victims;
- **users and controllers**: submit jobs from `jobs.new_job`, delete them, let them finish, fail
  or delete single members; controllers re-create deleted members (same name, new UID) and start
  new FrameworkController attempts; late gang members arrive after their reservation expired;
- **the kubelet**: starts bound pods (phase Running, a pod IP), stops terminating pods after a
  while (graceful deletion), finishes pods;
- **faults**: failing, timing out (before or after the server applied it) or slow Bindings; cut
  watch connections, watches ended by the server, 410 Gone on resume (compaction), failing lists;
  nodes going NotReady, cordoned or losing GPUs; duplicate and reordered calls (bind twice, two
  binds at once, filter after bind, prioritize before filter, bind with a stale node or UID,
  spurious preempt); and extender restarts (the service is thrown away and a new one recovers
  from the same API state while the cluster carries on).
- **the admin** (`--hostile`: `tenants`; `--cells`: `layouts`): entitlements and cells rewritten in
  the config file and hot-reloaded by the extender's own watcher; a refused edit is confirmed or
  left on disk, where a restart reads it (and refuses it at the start, until confirmed or put back).

After every operation the invariants of `checks` are checked; at the end every job is deleted,
time runs on past every TTL, and every per-pod and per-gang collection of the extender must be
empty again, the core's cell state that of a fresh core.

By hand (from the repository root):

    .venv/bin/python -m tests.soak.driver --ops 50000 --seed 7
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import logging
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from config.against import CONFIRM_FILE, config_digest
from config.load import LoadedConfig, load_config
from extender import kubesched
from extender.gangs import bindinfo, podspec
from extender.gangs.ledger import FORGET_PENDING_SECONDS, TOMBSTONE_SECONDS
from extender.http import wire
from extender.http.app import Service, build_app
from extender.http.reload import ConfigWatcher
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from extender.kube.client import pod_path
from extender.kube.reservation_sync import ReservationStore
from extender.kube.service import kube_service
from extender.kube.sync import ClusterSync
from extender.ops.background import expiry_interval
from extender.standalone import EXAMPLE_CONFIG
from loadtest.kubefake import ConnectionClosedError, FakeApiServer, FakeKube, Fault
from tests.soak import checks, layouts, tenants, vclock
from tests.soak.jobs import VCS, Job, new_job
from topology.core import Core
from topology.decisions import WaitCode
from topology.invariants import snapshot

Obj = dict[str, Any]
BINDING = r"/pods/[^/]+/binding$"
MAX_ACTIVE_JOBS = 24
BOUNDED_CACHES = (podspec._specs.clear, podspec._parts.clear, bindinfo._group_yaml.cache_clear)
MAX_VIOLATIONS_KEPT = 40
SIGNING_KEY = b"soak-bind-signing-key-0123456789"  # recovery adopts only bind info it signed
# the soak always prioritizes (a one-node answer too) and backs a pod off after preempting for it
SOAK_RULES = kubesched.Rules(prioritize_one=True, refilter=False)


@dataclass
class Options:
    """One soak run: how long, which seed, how the cluster is configured."""

    ops: int = 3000
    seconds: float | None = None  # also stop after this much real time
    seed: int = 1
    ttl: int = 60  # reservation TTL (the example config's, shortened so expiries happen often)
    check_every: int = 10  # the core's full invariant check every N operations (API checks: every one)
    restarts: bool = True
    progress: bool = False
    hostile: bool = False  # other tenants push past their entitlements (`tests.soak.tenants`)
    cells: bool = False  # the admin edits the hardware and quotas (`tests.soak.layouts`)


@dataclass
class Report:
    """What a run did and found; `lines` is what the CLI and `pytest -s` print."""

    seed: int
    ops: int = 0
    ops_by_kind: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    restarts: int = 0
    violations: list[str] = field(default_factory=list)
    violation_count: int = 0
    rss_kib: dict[str, int] = field(default_factory=dict)
    objects: dict[str, int] = field(default_factory=dict)
    sizes_end: dict[str, int] = field(default_factory=dict)
    virtual_seconds: float = 0.0
    real_seconds: float = 0.0
    longest_partial: float = 0.0
    logged: Counter[str] = field(default_factory=Counter)

    def violate(self, op: int, now: float, what: str) -> None:
        self.violation_count += 1
        if len(self.violations) < MAX_VIOLATIONS_KEPT:
            self.violations.append(f"seed {self.seed} op {op} t={now:.1f}: {what}")

    def state_line(self) -> str:
        left = {k: v for k, v in self.sizes_end.items() if v}
        if not left:
            return f"all {len(self.sizes_end)} per-pod and per-gang collections empty"
        return ", ".join(f"{k} {v}" for k, v in left.items())

    def lines(self) -> list[str]:
        def counts(c: Counter[str]) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"

        rss = ", ".join(f"{k} {v / 1024:.1f} MiB" for k, v in self.rss_kib.items())
        out = [
            f"soak seed {self.seed}: {self.ops} operations in {self.real_seconds:.1f}s "
            f"({self.virtual_seconds:.0f}s of cluster time)",
            f"  operations: {counts(self.ops_by_kind)}",
            f"  faults injected: {sum(self.faults.values())} ({counts(self.faults)})",
            f"  extender restarts: {self.restarts}",
            f"  outcomes: {counts(self.outcomes)}",
            f"  longest partially bound gang: {self.longest_partial:.0f}s",
            f"  extender log lines (warning+): {counts(self.logged)}",
            f"  RSS: {rss}",
            f"  Python objects: {', '.join(f'{k} {v}' for k, v in self.objects.items())}",
            f"  per-pod state at the end: {self.state_line()}",
            f"  violations: {self.violation_count}",
        ]
        out += [f"    {v}" for v in self.violations]
        return out


def rss_kib() -> int:
    """Resident set size now (Linux), else the peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def soak_config(
    ttl: int, *, rules: int | None = None, path: Path | None = None, layout: int = 0
) -> LoadedConfig:
    """The bundled example cluster with a shorter reservation TTL; with `path`, written there (the
    file the extender's watcher reloads), its cells as `layouts.LAYOUTS[layout]` and with `rules`,
    the entitlements `tenants.RULES[rules]` too."""
    if path is None:
        loaded = load_config(EXAMPLE_CONFIG)
        extras = loaded.model.topogang.model_copy(update={"reservation_ttl_seconds": ttl})
        return replace(loaded, model=loaded.model.model_copy(update={"topogang": extras}))
    text = layouts.layout_text(EXAMPLE_CONFIG.read_text(encoding="utf-8"), layout)
    text = re.sub(r"reservationTtlSeconds: \d+", f"reservationTtlSeconds: {ttl}", text)
    if rules is not None:
        text = tenants.config_text(text, rules)
    staged = path.with_suffix(".new")  # swapped in whole, as a ConfigMap volume is: never read half-written
    staged.write_text(text, encoding="utf-8")
    staged.replace(path)
    return load_config(path)


def node_object(name: str, *, ready: bool = True, cordoned: bool = False, gpus: int = 8) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": cordoned},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
        },
    }


def closure(fn: object, name: str) -> Any:
    """A variable `fn` closes over (the service keeps its caches in closures)."""
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None)
    if code is None or cells is None or name not in code.co_freevars:
        raise LookupError(f"{getattr(fn, '__qualname__', fn)} does not close over {name!r}: update the soak")
    return cells[code.co_freevars.index(name)].cell_contents


class LogTally(logging.Handler):
    """Counts the extender's warnings and errors; an error not caused by a closed (dead) client
    is a violation: something raised that nothing expected."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.name}:{record.levelname}"] += 1
        if record.levelno >= logging.ERROR:
            exc = record.exc_info[1] if record.exc_info else None
            if isinstance(exc, ConnectionClosedError):
                return
            text = record.getMessage()
            if text.startswith("config reload refused") or "refused at the start" in text:
                return  # an edit that costs running gangs, refused until confirmed (`Soak.check` judges)
            self.errors.append(f"extender logged {record.levelname}: {record.getMessage()} ({exc!r})")


class InProcess:
    """kube-scheduler's transport and preemption for `extender.kubesched`, in the soak: the verbs
    called in-process on the running service (what kube-scheduler saw and got is tallied and
    remembered), the dry run's victims read from the API server, and every victim the extender
    keeps deleted."""

    def __init__(self, soak: Soak) -> None:
        self.soak = soak

    async def filter(self, pod: kubesched.Pod, names: Sequence[str]) -> dict[str, Any]:
        soak = self.soak
        copied = copy.deepcopy(dict(pod))
        uid = kpods.uid(copied)
        soak.seen_as[uid] = copied
        r = await soak.s.filter(soak.filter_args(copied, list(names)))
        if r["Error"]:
            soak.report.outcomes["filter error"] += 1
            if soak.opts.hostile and tenants.not_entitled(r["Error"]):
                soak.report.outcomes["filter refused: not entitled"] += 1
        elif passed := r["NodeNames"] or []:
            soak.answers[uid] = passed
            soak.report.outcomes["filter passed"] += 1
        else:
            soak.report.outcomes["filter unschedulable"] += 1
            why = {**(r.get("FailedNodes") or {}), **(r.get("FailedAndUnresolvableNodes") or {})}
            if soak.opts.hostile and any(f"[{WaitCode.TENANT_LIMIT.value}]" in t for t in why.values()):
                soak.report.outcomes["filter waits: tenant limit"] += 1
        return r

    async def prioritize(self, pod: kubesched.Pod, names: Sequence[str]) -> list[dict[str, Any]]:
        return await self.soak.s.prioritize(self.soak.filter_args(copy.deepcopy(dict(pod)), list(names)))

    async def bind(self, pod: kubesched.Pod, node: str) -> dict[str, Any]:
        return await self.soak.bind(pod, node, kpods.uid(pod))

    async def preempt(self, pod: kubesched.Pod, victims: Mapping[str, Any]) -> Any:
        doc = {"Pod": copy.deepcopy(dict(pod)), "NodeNameToMetaVictims": victims}
        try:
            return await self.soak.s.preempt(wire.parse_preemption_args(doc))
        except Exception as exc:  # VerbError: an HTTP error status
            self.soak.report.outcomes[f"preempt refused ({type(exc).__name__})"] += 1
            return None

    def dry_run(self, nodes: Sequence[str], priority: int) -> dict[str, Any]:
        """On each candidate node, the lower-priority pods the API server has bound there."""
        on: dict[str, list[str]] = {}
        for p in self.soak.pods():
            n = kpods.node_name(p)
            if (
                n is not None
                and n in nodes
                and int(p["spec"].get("priority", 0)) < priority
                and not kpods.finished(p)
            ):
                on.setdefault(n, []).append(kpods.uid(p))
        return kubesched.meta_victims(sorted(on.items()))

    def evict(self, chosen: Mapping[str, Any]) -> None:
        """Every victim the extender named, on every node (more than kube-scheduler deletes)."""
        by_uid = {kpods.uid(p): p for p in self.soak.pods()}
        for v in chosen.values():
            for m in v.get("Pods") or []:
                victim = by_uid.get(m.get("UID", ""))
                if victim is not None:
                    self.soak.report.outcomes["victims deleted by kube-scheduler"] += 1
                    self.soak.delete_pod(victim)


class Soak:
    """One run: the fake API server, the extender built on it (again at each restart), and the
    actors around them, all on one virtual-time loop."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.config_dir = tempfile.TemporaryDirectory(prefix="topogang-soak-")
        self.config_path = Path(self.config_dir.name) / "cluster.yaml"
        self.judge = tenants.Judge()  # `hostile`: the entitlements in force, and what each gang was given
        rules = self.judge.rules if opts.hostile else None
        written = opts.hostile or opts.cells  # else the example file itself, as shipped
        self.loaded = soak_config(opts.ttl, rules=rules, path=self.config_path if written else None)
        self.layout = 0  # `cells`: the layout in force, and the one on disk (a refused edit stays there)
        self.on_disk = 0
        self.ttl = float(opts.ttl)
        self.server = FakeApiServer()
        self.nodes = sorted(Core(self.loaded.spec).topo.node_names)
        if opts.cells:  # every layout's nodes are Kubernetes nodes, described to the extender or not
            self.nodes = layouts.every_node(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
        self.report = Report(opts.seed)
        self.jobs: dict[str, Job] = {}
        self.serial = 0
        self.op = 0
        # the extender
        self.kube: FakeKube | None = None
        self.service: Service | None = None
        self.app: Starlette | None = None
        self.stack: contextlib.AsyncExitStack | None = None
        self.injected_before: Counter[str] = Counter()
        # kube-scheduler
        self.backoff: dict[str, float] = {}
        self.binding: dict[str, asyncio.Task[Any]] = {}
        self.answers: dict[str, list[str]] = {}  # pod uid -> nodes of its last filter answer
        self.seen_as: dict[str, Obj] = {}  # pod uid -> the pod as kube-scheduler last filtered it
        self.verbs = InProcess(self)
        # the kubelet
        self.starts: dict[str, float] = {}  # uid -> when the bound pod starts running
        self.stops: dict[str, float] = {}  # uid -> when the terminating pod is gone
        self.restores: dict[str, float] = {}  # node -> when it is healthy again
        slack = expiry_interval(self.ttl) + 5.0  # the expiry sweep's period, and a margin
        self.partial = checks.PartialGangs(self.ttl, slack)
        # gangs the core held whole right after a Binding, since the last check: one can be whole
        # only between two checks (its last member binds while a failed member's deletion is still
        # on its way to the extender's watch), and its TTL rightly starts again from there
        self.whole_between: set[str] = set()
        self.logs = LogTally()
        self.before_restart: dict[str, tuple[Any, ...]] | None = None  # bound gangs' requests then

    # ------------------------------------------------------------------------------ plumbing
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    @property
    def s(self) -> Scheduler:
        assert self.service is not None
        return self.service.scheduler

    def pods(self) -> list[Obj]:
        return self.server.items("v1", "pods")

    def pod_by_name(self, ns: str, name: str) -> Obj | None:
        return self.server.objects.get(("v1", "pods", ns, name))

    def sync(self) -> ClusterSync:
        assert self.service is not None
        for fn in self.service.background:
            owner = getattr(fn, "__self__", None)
            if isinstance(owner, ClusterSync):
                return owner
        raise LookupError("the service runs no ClusterSync; update the soak")

    def store(self) -> ReservationStore:
        assert self.service is not None
        lead = next(fn for fn in self.service.background if getattr(fn, "__name__", "") == "lead")
        store = closure(closure(lead, "serve_as_leader"), "store")
        assert isinstance(store, ReservationStore)
        return store

    async def start_extender(self) -> None:
        loop = asyncio.get_running_loop()
        self.kube = FakeKube(self.server, watch_lag=self.rng.choice((0.0, 0.0, 0.5, 2.0)))
        self.kube.request = self.marked_deletions(self.kube)  # type: ignore[method-assign,assignment]
        self.service = kube_service(self.loaded, self.kube, clock=loop.time, signing_key=SIGNING_KEY)
        # wall time follows the virtual clock too: the ledger's tombstones, the persisted
        # reservations' expiresAt and the pods' creation times (the VC order) are read against it
        self.service.scheduler.gang_ledger.wall = lambda: self.server.wall_offset + loop.time()
        self.service.scheduler.holders.wall = lambda: self.server.wall_offset + loop.time()
        self.store().wall = lambda: datetime.fromtimestamp(self.server.wall_offset + loop.time(), UTC)
        self.app = build_app(self.service)
        self.stack = contextlib.AsyncExitStack()
        await self.stack.enter_async_context(self.app.router.lifespan_context(self.app))

    def marked_deletions(self, kube: FakeKube) -> Callable[..., Awaitable[dict[str, Any] | None]]:
        """`kube.request`, checking the extender's pod deletions on their way: a pod it ends carries
        its DisruptionTarget mark by then (`extender.kube.evictions`). No fault is injected on its
        status writes, and the fake server answers each request at once, so the mark cannot have
        failed unless the process is gone (its connection closed) or the pod went first."""
        send = kube.request

        async def request(
            method: str,
            path: str,
            query: Sequence[tuple[str, str]] = (),
            body: Mapping[str, Any] | None = None,
        ) -> dict[str, Any] | None:
            if method == "DELETE" and "/pods/" in path and not kube.closed:
                pod = self.server.get(path)
                uid = ((body or {}).get("preconditions") or {}).get("uid")
                if pod is not None and kpods.uid(pod) == uid and not kpods.disrupted(pod):
                    self.violate(
                        [f"the extender deleted pod {path} ({uid}) without its DisruptionTarget mark"]
                    )
            return await send(method, path, query, body)

        return request

    async def stop_extender(self) -> None:
        """The process dies: in-flight verb calls, background tasks and connections go with it."""
        tasks = list(self.binding.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.binding.clear()
        if self.kube is not None:
            self.injected_before.update(self.kube.injected)
            self.kube.close()
        if self.stack is not None:
            await self.stack.aclose()
        self.stack = self.app = self.service = None

    async def settle(self, dt: float) -> None:
        await asyncio.sleep(max(dt, 0.001))

    # ------------------------------------------------------------------------------ the run
    async def run(self) -> Report:
        log = logging.getLogger("topogang")
        old_level, old_propagate = log.level, log.propagate
        log.addHandler(self.logs)
        log.setLevel(logging.WARNING)
        log.propagate = False
        t0 = time.perf_counter()
        start = self.now()
        try:
            for n in self.nodes:
                self.server.create("/api/v1/nodes", node_object(n))
            await self.start_extender()
            await self.settle(1.0)
            gc.collect()
            self.report.rss_kib["start"] = rss_kib()
            self.report.objects["start"] = len(gc.get_objects())
            await self.loop(t0)
            await self.drain()
        finally:
            await self.stop_extender()
            self.config_dir.cleanup()
            log.removeHandler(self.logs)
            log.setLevel(old_level)
            log.propagate = old_propagate
        self.report.real_seconds = time.perf_counter() - t0
        self.report.virtual_seconds = self.now() - start
        self.report.longest_partial = self.partial.longest
        self.report.logged = self.logs.counts
        self.report.faults.update(self.injected_before)
        return self.report

    def ops(self) -> list[tuple[str, float, Callable[[], Awaitable[None]]]]:
        table: list[tuple[str, float, Callable[[], Awaitable[None]]]] = [
            ("schedule", 30, self.op_schedule),
            ("create job", 8, self.op_create_job),
            ("finish job", 3, self.op_finish_job),
            ("delete job", 2.5, self.op_delete_job),
            ("fail member", 1.5, self.op_fail_member),
            ("delete member", 1.5, self.op_delete_member),
            ("new framework attempt", 0.7, self.op_new_attempt),
            ("quiet period", 0.5, self.op_quiet),
            ("node fault", 1, self.op_node_fault),
            ("bind twice", 2, self.op_bind_twice),
            ("two binds at once", 1, self.op_concurrent_binds),
            ("filter after bind", 2, self.op_filter_bound),
            ("stale bind", 2, self.op_stale_bind),
            ("prioritize first", 1, self.op_prioritize_first),
            ("spurious preempt", 1, self.op_spurious_preempt),
            ("binding fault", 3, self.op_binding_fault),
            ("watch cut", 1.5, self.op_watch_cut),
            ("watch end", 0.5, self.op_watch_end),
            ("watch 410", 0.7, self.op_watch_gone),
            ("watch bookmark", 0.5, self.op_bookmark),
            ("list fault", 0.3, self.op_list_fault),
        ]
        if self.opts.restarts:
            table.append(("extender restart", 0.35, self.op_restart))
        if self.opts.hostile:
            table += [
                ("hostile tenant job", 4, self.op_hostile_job),
                ("request edited", 1.5, self.op_edit_request),
                ("entitlements reloaded", 0.3, self.op_reload_rules),
            ]
        if self.opts.cells:
            table.append(("cells reloaded", 0.3, self.op_reload_cells))
        return table

    async def loop(self, t0: float) -> None:
        table = self.ops()
        weights = [w for _, w, _ in table]
        half = self.opts.ops // 2
        while self.op < self.opts.ops:
            if self.opts.seconds is not None and time.perf_counter() - t0 > self.opts.seconds:
                break
            self.op += 1
            name, _, fn = self.rng.choices(table, weights=weights)[0]
            self.report.ops_by_kind[name] += 1
            await fn()
            await self.kubelet_and_controllers()
            await self.settle(self.rng.expovariate(1 / 0.3))
            self.check(full=self.op % self.opts.check_every == 0)
            if self.op == half:
                self.report.rss_kib["middle"] = rss_kib()
            if self.opts.progress and self.op % 1000 == 0:
                print(f"  op {self.op}: {self.report.violation_count} violations", file=sys.stderr)
        self.report.ops = self.op
        self.report.rss_kib.setdefault("middle", rss_kib())
        self.report.rss_kib["end of operations"] = rss_kib()

    # ------------------------------------------------------------------------------ checks
    def violate(self, lines: list[str]) -> None:
        for line in lines:
            self.report.violate(self.op, self.now(), line)

    def check(self, *, full: bool) -> None:
        pods = self.pods()
        ready = self.service is not None and self.s.ready
        watched = ready and self.kube is not None and self.kube.caught_up("/api/v1/pods")
        self.violate(checks.double_held(pods))
        whole = frozenset(self.whole_gangs() | self.whole_between)
        self.whole_between.clear()
        self.violate(self.partial.check(pods, self.now(), watched=watched, whole=whole))
        self.violate(self.logs.errors)
        self.logs.errors.clear()
        if self.service is not None and "refused at the start" in self.s.not_ready_reason:
            self.violate([f"the extender refused its config at the start: {self.s.not_ready_reason}"])
        if not ready:
            return
        if self.before_restart is not None:  # the first check once the restarted extender is ready
            self.violate(checks.restart_kept(self.before_restart, checks.bound_requests(self.s)))
            self.before_restart = None
        if watched:
            self.violate(checks.core_vs_api(self.s, pods))
        if full:
            self.violate(checks.core_invariants(self.s))
        if self.opts.hostile:
            self.violate(self.judge.violations(self.s.core))
            self.violate(tenants.ledger_violations(self.s.gang_ledger))

    # ------------------------------------------------------------------------------ kube-scheduler
    def pending(self) -> list[Obj]:
        now = self.now()
        out = []
        for p in self.pods():
            uid = kpods.uid(p)
            if kpods.node_name(p) or kpods.deleting(p) or kpods.finished(p) or uid in self.binding:
                continue
            if self.backoff.get(uid, 0.0) > now:
                continue
            out.append(p)
        return out

    def pick_pending(self) -> Obj | None:
        cands = self.pending()
        if not cands:
            return None
        if self.rng.random() < 0.8:  # the scheduling queue: priority, then age
            return min(cands, key=lambda p: (-int(p["spec"].get("priority", 0)), kpods.uid(p)))
        return self.rng.choice(cands)

    def retry_later(self, uid: str) -> None:
        self.backoff[uid] = self.now() + self.rng.uniform(1.0, 10.0)

    def filter_args(self, pod: Obj, names: list[str]) -> wire.ExtenderArgs:
        return wire.parse_extender_args({"Pod": pod, "Nodes": None, "NodeNames": names}, self.s.node_lists)

    async def place(self, pod: Obj) -> str | None:
        """kube-scheduler's scheduling cycle (`extender.kubesched`): the chosen node, or None (the
        pod is backed off)."""
        got = await kubesched.drive_async(
            kubesched.place(pod, self.nodes, self.verbs, SOAK_RULES), self.verbs
        )
        if isinstance(got, kubesched.Outcome):
            self.retry_later(kpods.uid(pod))
            return None
        return got

    async def prioritize(self, pod: Obj, names: list[str]) -> str:
        return kubesched.best_node(names, await self.verbs.prioritize(pod, names))

    async def schedule(self, pod: Obj) -> None:
        node = await self.place(pod)
        if node is not None:
            self.start_bind(pod, node)

    def start_bind(self, pod: Obj, node: str, uid: str | None = None) -> asyncio.Task[Any]:
        uid = uid or kpods.uid(pod)
        task = asyncio.get_running_loop().create_task(self.bind(pod, node, uid))
        self.binding[uid] = task
        task.add_done_callback(lambda t: self.binding.pop(uid, None) if self.binding.get(uid) is t else None)
        return task

    async def bind(self, pod: kubesched.Pod, node: str, uid: str) -> dict[str, Any]:
        args = wire.parse_binding_args(
            {"PodName": kpods.name(pod), "PodNamespace": kpods.namespace(pod), "PodUID": uid, "Node": node}
        )
        r = await self.s.bind(args)
        if r["Error"]:
            self.report.outcomes["bind error"] += 1
            self.retry_later(uid)
        else:
            self.report.outcomes["bind ok"] += 1
            if self.opts.hostile and kpods.namespace(pod) in tenants.OTHERS:
                self.report.outcomes["bind ok: another tenant's pod"] += 1
            self.whole_between.update(self.whole_gangs())
        return r

    def whole_gangs(self) -> set[str]:
        """The gangs the core holds with every slot claimed (none while the extender is down)."""
        if self.service is None or not self.s.ready:
            return set()
        return {g.name for g in self.s.core.gangs() if all(x.pod_uid is not None for x in g.slots)}

    async def preempt(self, pod: Obj, nodes: list[str]) -> None:
        await kubesched.drive_async(kubesched.preempt(pod, nodes, self.verbs), self.verbs)

    # ------------------------------------------------------------------------------ operations
    async def op_schedule(self) -> None:
        pod = self.pick_pending()
        if pod is not None:
            await self.schedule(pod)

    def full(self) -> bool:
        return sum(1 for j in self.jobs.values() if j.state == "active") >= MAX_ACTIVE_JOBS

    async def op_create_job(self) -> None:
        if self.full():
            return
        self.serial += 1
        job = new_job(self.rng, self.serial, self.now(), self.ttl)
        if self.opts.hostile:  # where entitlements apply, tenants use PriorityClasses too
            job = tenants.with_class(self.rng, job)
        self.jobs[job.key] = job
        owner = job.owner()
        if owner is not None:
            path, body = owner
            self.server.create(path, body)
            job.owner_path = f"{path}/{job.name}"

    def active(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state == "active"]

    def job_pods(self, job: Job) -> list[Obj]:
        return [
            p for i in range(job.size) if (p := self.pod_by_name(job.namespace, job.pod_name(i))) is not None
        ]

    async def op_hostile_job(self) -> None:
        if self.full():
            return
        self.serial += 1
        job = tenants.hostile_job(self.rng, self.serial, [j for j in self.active() if j.namespace in VCS])
        if job.key not in self.jobs:
            self.jobs[job.key] = job

    async def op_edit_request(self) -> None:
        """A tenant rewrites a live member's request in place (annotations and labels are mutable)."""
        cands = [p for j in self.active() for p in self.job_pods(j) if not kpods.deleting(p)]
        if not cands:
            return
        p = self.rng.choice(cands)
        names = sorted({j.name for j in self.active() if j.namespace == kpods.namespace(p)})
        patch = tenants.edit(self.rng, p, names)
        with contextlib.suppress(Exception):
            self.server.patch(pod_path(kpods.namespace(p), kpods.name(p)), patch)
            self.report.faults["request edited in place"] += 1

    async def op_reload_rules(self) -> None:
        """The admin rewrites the entitlements; the extender's own config watcher applies them."""
        rules = self.rng.choice([k for k in range(len(tenants.RULES)) if k != self.judge.rules])
        self.on_disk = self.layout  # the entitlements are written over the cells in force
        self.loaded = soak_config(self.opts.ttl, rules=rules, path=self.config_path, layout=self.layout)
        watcher = self.watcher()
        self.judge.renumbered()  # the core is rebuilt around the running gangs: new gang ids
        await watcher.check()  # None: its own poll applied it first
        if watcher.status.last_result != "applied":
            self.violate([f"entitlements {rules} not applied: {watcher.status.last_errors}"])
        self.judge.rules = rules
        self.report.faults["entitlements reloaded"] += 1

    def watcher(self) -> ConfigWatcher:
        assert self.service is not None
        owners = [getattr(fn, "__self__", None) for fn in self.service.background]
        return next(w for w in owners if isinstance(w, ConfigWatcher))

    async def op_reload_cells(self) -> None:
        """The admin rewrites the cells (`layouts`); the extender's watcher applies the edit, or
        refuses one that costs running gangs until the admin confirms it (some are confirmed, the
        others stay on disk, refused, until the next edit or a restart reads them)."""
        layout = self.rng.choice([k for k in range(len(layouts.LAYOUTS)) if k != self.on_disk])
        rules = self.judge.rules if self.opts.hostile else None
        soak_config(self.opts.ttl, rules=rules, path=self.config_path, layout=layout)
        self.on_disk = layout
        watcher = self.watcher()
        self.judge.renumbered()
        await watcher.check()
        if watcher.status.last_result == "refused" and self.rng.random() < 0.5:
            (self.config_path.parent / CONFIRM_FILE).write_text(watcher.status.refused_digest)
            self.report.faults["cells reload confirmed"] += 1
            await watcher.check()
        result = watcher.status.last_result
        self.report.faults[f"cells reloaded: {result}"] += 1
        if result == "applied":
            self.layout, self.loaded = layout, load_config(self.config_path)
        elif result != "refused":
            self.violate(
                [f"layout {layout} ({layouts.LAYOUTS[layout][0]}) {result}: {watcher.status.last_errors}"]
            )

    async def op_finish_job(self) -> None:
        running = [
            j
            for j in self.active()
            if len(ps := self.job_pods(j)) == j.size
            and all(kpods.phase(p) == "Running" and not kpods.deleting(p) for p in ps)
        ]
        if not running:
            return
        job = self.rng.choice(running)
        job.state, job.done_at = "done", self.now() + self.rng.uniform(5, 60)
        for p in self.job_pods(job):
            self.set_phase(p, "Succeeded")

    async def op_delete_job(self) -> None:
        jobs = self.active()
        if jobs:
            self.delete_job(self.rng.choice(jobs))

    def delete_job(self, job: Job) -> None:
        job.state = "deleted"
        for p in self.job_pods(job):
            self.delete_pod(p)
        if job.owner_path is not None:
            with contextlib.suppress(Exception):
                self.server.delete(job.owner_path)

    async def op_fail_member(self) -> None:
        cands = [p for j in self.active() for p in self.job_pods(j) if kpods.phase(p) == "Running"]
        if cands:
            self.set_phase(self.rng.choice(cands), "Failed")

    async def op_delete_member(self) -> None:
        cands = [p for j in self.active() for p in self.job_pods(j) if not kpods.deleting(p)]
        if cands:
            self.delete_pod(self.rng.choice(cands))

    async def op_new_attempt(self) -> None:
        """FrameworkController retries the whole framework: new attempt, every task pod re-created."""
        fcs = [j for j in self.active() if j.kind in ("fc", "fcfw")]
        if fcs:
            job = self.rng.choice(fcs)
            job.attempt += 1
            for p in self.job_pods(job):
                self.delete_pod(p)

    async def op_quiet(self) -> None:
        """Nothing is scheduled for a while: reservations of gangs still missing members expire."""
        await self.settle(self.ttl + expiry_interval(self.ttl) + 1)

    async def op_node_fault(self) -> None:
        healthy = [n for n in self.nodes if n not in self.restores]
        if not healthy:
            return
        n = self.rng.choice(healthy)
        kind = self.rng.choice(("NotReady", "cordoned", "GPUs missing"))
        gpus = 6 if kind == "GPUs missing" else 8
        body = node_object(n, ready=kind != "NotReady", cordoned=kind == "cordoned", gpus=gpus)
        self.server.replace(f"/api/v1/nodes/{n}", body)
        self.restores[n] = self.now() + self.rng.uniform(5, 60)
        self.report.faults[f"node {kind}"] += 1

    def bound_pods(self) -> list[Obj]:
        return [
            p for p in self.pods() if kpods.node_name(p) and not kpods.finished(p) and not kpods.deleting(p)
        ]

    async def op_bind_twice(self) -> None:
        """kube-scheduler retries a bind whose reply it lost: same pod, same (or another) node."""
        bound = self.bound_pods()
        if not bound:
            return
        p = self.rng.choice(bound)
        node = kpods.node_name(p) or ""
        if self.rng.random() < 0.3:
            node = self.rng.choice(self.nodes)
        await self.bind(p, node, kpods.uid(p))
        self.report.faults["duplicate bind"] += 1

    async def op_concurrent_binds(self) -> None:
        """Two binds of one pod in flight at once (a slow Binding, then a retry)."""
        pod = self.pick_pending()
        if pod is None:
            return
        node = await self.place(pod)
        if node is None:
            return
        assert self.kube is not None
        self.kube.inject(
            Fault("POST", BINDING, "delay", seconds=self.rng.uniform(0.5, 5), label="binding slow")
        )
        first = self.start_bind(pod, node)
        await asyncio.sleep(0)
        await asyncio.gather(first, self.bind(pod, node, kpods.uid(pod)), return_exceptions=True)
        self.report.faults["concurrent binds"] += 1

    async def op_filter_bound(self) -> None:
        """A stale scheduler cache: filter (and prioritize, and maybe bind) a pod already bound."""
        bound = [p for p in self.bound_pods() if kpods.uid(p) in self.seen_as]
        if not bound:
            return
        p = self.rng.choice(bound)
        stale = self.seen_as[kpods.uid(p)]
        self.report.faults["filter after bind"] += 1
        r = await self.s.filter(self.filter_args(copy.deepcopy(stale), self.nodes))
        names = r["NodeNames"] or []
        if names:
            node = await self.prioritize(stale, names)
            if self.rng.random() < 0.5:
                await self.bind(stale, node, kpods.uid(stale))

    async def op_stale_bind(self) -> None:
        """Bind from an old answer: the node a filter gave long ago, a node it never gave, or the
        UID of a pod since re-created under the same name."""
        choice = self.rng.random()
        live = {kpods.uid(p) for p in self.pods()}
        if choice < 0.4:
            cands = [u for u in self.answers if u in live and u not in self.binding]
            if not cands:
                return
            uid = self.rng.choice(cands)
            pod, node = self.seen_as[uid], self.rng.choice(self.answers[uid])
        elif choice < 0.7:
            pending = self.pending()
            if not pending:
                return
            pod = self.rng.choice(pending)
            uid, node = kpods.uid(pod), self.rng.choice(self.nodes)
        else:
            gone = [u for u in self.seen_as if u not in live]
            if not gone:
                return
            uid = self.rng.choice(gone)
            pod = self.seen_as[uid]
            node = self.rng.choice(self.answers.get(uid) or self.nodes)
        self.report.faults["stale bind"] += 1
        await self.bind(pod, node, uid)

    async def op_prioritize_first(self) -> None:
        pod = self.pick_pending()
        if pod is None:
            return
        self.report.faults["prioritize before filter"] += 1
        await self.s.prioritize(self.filter_args(copy.deepcopy(pod), self.nodes))
        await self.schedule(pod)

    async def op_spurious_preempt(self) -> None:
        """Preempt for a waiting pod, naming a few nodes and lower-priority pods there."""
        pending = [p for p in self.pending() if int(p["spec"].get("priority", 0)) >= 0]
        if not pending:
            return
        self.report.faults["spurious preempt"] += 1
        await self.preempt(self.rng.choice(pending), self.rng.sample(self.nodes, 3))

    async def op_binding_fault(self) -> None:
        assert self.kube is not None
        kind = self.rng.choice(("error", "error", "timeout", "lost-reply", "delay"))
        status = self.rng.choice((500, 500, 503, 429, 409))
        label = {"error": f"binding {status}", "timeout": "binding timeout (not applied)"}.get(kind)
        label = label or {"lost-reply": "binding reply lost (applied)", "delay": "binding slow"}[kind]
        n = self.rng.randint(1, 3)
        self.kube.inject(Fault("POST", BINDING, kind, n, status, self.rng.uniform(0.5, 8), label))

    async def op_watch_cut(self) -> None:
        assert self.kube is not None
        self.kube.cut_watches()
        self.report.faults["watch cut"] += 1

    async def op_watch_end(self) -> None:
        assert self.kube is not None
        self.kube.end_watches()
        self.report.faults["watch ended by server"] += 1

    async def op_watch_gone(self) -> None:
        assert self.kube is not None
        self.server.compact()
        self.kube.end_watches()
        self.report.faults["watch 410 Gone"] += 1

    async def op_bookmark(self) -> None:
        self.server.bookmark()

    async def op_list_fault(self) -> None:
        assert self.kube is not None
        self.kube.inject(Fault("LIST", "/api/v1/pods$", "error", 1, 500, label="pod list 500"))
        self.kube.cut_watches()
        self.report.faults["watch cut"] += 1

    async def op_restart(self) -> None:
        in_force = self.layout
        if self.opts.cells:  # the restarted process reads the file as it is, a refused edit too
            self.loaded, self.layout = load_config(self.config_path), self.on_disk
        self.before_restart = (
            checks.bound_requests(self.s) if self.service is not None and self.s.ready else {}
        )
        await self.restart()
        if self.opts.cells and await self.refused_at_start():
            # the config in force is refused only for pods left running on nodes it does not have
            # (an earlier confirmed edit), once the file changed since (a confirmation names one digest)
            config_nodes = set(Core(self.loaded.spec).node_names())
            outside = [p for p in self.pods() if kpods.node_name(p) not in (None, *config_nodes)]
            if self.layout == in_force and not outside:
                self.violate([f"a restart refused layout {in_force}, the one its gangs run under"])
            if self.layout == in_force or self.rng.random() < 0.5:  # confirmed, or the config in force back
                (self.config_path.parent / CONFIRM_FILE).write_text(config_digest(self.loaded))
                self.report.faults["refused at a restart, then confirmed"] += 1
            else:
                rules = self.judge.rules if self.opts.hostile else None
                self.loaded = soak_config(self.opts.ttl, rules=rules, path=self.config_path, layout=in_force)
                self.layout = self.on_disk = in_force
                self.report.faults["refused at a restart, then put back"] += 1
            await self.restart()  # the Deployment starts the replica the refusal ended again

    async def restart(self) -> None:
        self.judge.renumbered()
        await self.stop_extender()
        self.report.restarts += 1
        self.backoff.clear()  # kube-scheduler saw every bind in flight fail: retry soon
        self.partial.restart()
        await self.start_extender()

    async def refused_at_start(self) -> bool:
        """Whether the restarted extender refused the config on disk (`extender.kube.start_config`:
        `topogang serve` exits then), once its start's recovery is done."""
        for _ in range(200):
            if self.sync().synced:
                break
            await self.settle(0.5)
        return "refused at the start" in self.s.not_ready_reason

    # ------------------------------------------------------------------------------ the others
    def set_phase(self, pod: Obj, phase: str) -> None:
        status = dict(pod.get("status") or {})
        status["phase"] = phase
        with contextlib.suppress(Exception):
            self.server.replace(
                pod_path(kpods.namespace(pod), kpods.name(pod)) + "/status",
                {"metadata": {"uid": kpods.uid(pod)}, "status": status},
            )

    def delete_pod(self, pod: Obj) -> None:
        body = {"preconditions": {"uid": kpods.uid(pod)}}
        with contextlib.suppress(Exception):
            self.server.delete(pod_path(kpods.namespace(pod), kpods.name(pod)), body)

    async def kubelet_and_controllers(self) -> None:
        now = self.now()
        live: set[str] = set()
        for p in list(self.pods()):
            uid = kpods.uid(p)
            live.add(uid)
            path = pod_path(kpods.namespace(p), kpods.name(p))
            if kpods.deleting(p):
                when = self.stops.setdefault(uid, now + self.rng.uniform(0, 10))
                if when <= now:
                    self.server.finalize(path)
                continue
            if kpods.node_name(p) and kpods.phase(p) == "Pending":
                when = self.starts.setdefault(uid, now + self.rng.uniform(0, 3))
                if when <= now:
                    k = int(uid[-4:], 16)
                    status = {
                        **(p.get("status") or {}),
                        "phase": "Running",
                        "podIP": f"10.{k >> 8}.{k & 255}.2",
                    }
                    self.server.replace(path + "/status", {"status": status})
        for store in (self.starts, self.stops, self.backoff, self.answers, self.seen_as):
            for uid in [u for u in store if u not in live]:
                if store is not self.seen_as or self.rng.random() < 0.05:  # a few stale ones stay
                    del store[uid]
        for n, when in list(self.restores.items()):
            if when <= now:
                self.server.replace(f"/api/v1/nodes/{n}", node_object(n))
                del self.restores[n]
        for job in list(self.jobs.values()):
            self.reconcile(job, now)

    def reconcile(self, job: Job, now: float) -> None:
        """The job's controller: failed members are deleted and re-created; missing ones created."""
        if job.state == "done":
            if job.done_at <= now:
                for p in self.job_pods(job):
                    self.delete_pod(p)
                if not self.job_pods(job):
                    if job.owner_path is not None:
                        with contextlib.suppress(Exception):
                            self.server.delete(job.owner_path)
                    del self.jobs[job.key]
            return
        if job.state == "deleted":
            if not self.job_pods(job):
                del self.jobs[job.key]
            return
        for i in range(job.size):
            if job.late.get(i, 0.0) > now:
                continue
            found = self.pod_by_name(job.namespace, job.pod_name(i))
            if found is None:
                self.server.create(f"/api/v1/namespaces/{job.namespace}/pods", job.pod(i))
                continue
            p = found
            attempt = kpods.pod_annotations(p).get("FC_FRAMEWORK_ATTEMPT_INSTANCE_UID")
            old_attempt = job.kind in ("fc", "fcfw") and attempt != job.attempt_uid
            if kpods.phase(p) == "Failed" or (old_attempt and not kpods.deleting(p)):
                self.delete_pod(p)

    # ------------------------------------------------------------------------------ the end
    async def drain(self) -> None:
        """Delete everything, let every timer run out, and check that nothing is left behind."""
        if self.kube is not None:
            self.kube.faults.clear()
        for job in list(self.jobs.values()):
            if job.state != "deleted":
                self.delete_job(job)
        for n in self.nodes:  # every node healthy again
            self.restores[n] = 0.0
        horizon = max(TOMBSTONE_SECONDS, FORGET_PENDING_SECONDS, self.ttl) + 120
        step = 5.0
        waited = 0.0
        while waited < horizon or self.pods():
            await self.kubelet_and_controllers()
            await self.settle(step)
            waited += step
            if waited > horizon + 600:
                self.violate([f"pods still in the API after draining: {len(self.pods())}"])
                break
        while self.binding:
            await asyncio.gather(*self.binding.values(), return_exceptions=True)
        await self.settle(step)
        self.check(full=True)
        s = self.s
        s.gang_ledger.prune(s.core)  # pruning runs on the next release; a quiet cluster has none
        self.server.compact()  # the fake's own memory (change log, Events, decoded bind info) aside
        self.server.events.clear()
        checks.forget_decoded()
        for clear in BOUNDED_CACHES:  # bounded by design (LRU): full of this run's specs, not leaks
            clear()
        gc.collect()
        self.report.rss_kib["end"] = rss_kib()
        self.report.objects["end"] = len(gc.get_objects())
        sizes = self.state_sizes()
        self.report.sizes_end = sizes
        left = {k: v for k, v in sizes.items() if v > 0}
        if left:
            self.violate([f"per-pod state left after every pod is gone: {left}"])
        if s.core.gangs():
            self.violate([f"core still holds gangs: {[g.name for g in s.core.gangs()]}"])
        if snapshot(s.core) != snapshot(Core(self.loaded.spec)):
            self.violate(["the core's cell state differs from a fresh core's after every gang is gone"])

    def state_sizes(self) -> dict[str, int]:
        """Every per-pod or per-gang collection the extender keeps."""
        s = self.s
        sync = self.sync()
        conv = s.conventions
        gl = s.gang_ledger
        return {
            "scheduler.pods": len(s.pods),
            "scheduler.uid_by_name": len(s.pods._uid_by_name),
            "scheduler.gang_pods": len(s.pods._gang_pods),
            "scheduler.waiting": len(s.waiting),
            "scheduler.tentative": len(s.promises),
            "scheduler.inflight": len(s.inflight),
            "core.pod_gang": len(s.core.reservations.pod_gang),
            "core.gangs": len(s.core.reservations.by_id),
            "core.preemptors": len(s.core.preemptors),
            "sync.live": len(sync.live),
            "sync.done": len(sync.done),
            "sync.foreign": len(sync.foreign),
            "ledger.records": len(gl.records),
            "ledger.pods": len(gl.pods),
            "ledger.inflight": len(gl.inflight),
            "ledger.frameworks": len(gl.frameworks),
            "conventions.objects": len(conv._objects),
            "conventions.soft": len(conv.soft),
            "conventions.hard": len(conv.hard),
            "conventions.softened": len(conv.softened),
            "events.sent": len(closure(s.on_wait, "recorder").sent),
            "frameworks.cache": len(closure(s.framework_lookup, "frameworks")),
            "reservations.written": len(self.store().written),
            "requeue.turned_away": s.requeue.counts()[0],
            "requeue.due": s.requeue.counts()[1],
        }


def run_soak(opts: Options) -> Report:
    return vclock.run(Soak(opts).run())  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.soak.driver", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=3000, help="operations per seed (default 3000)")
    p.add_argument("--seconds", type=float, default=None, help="also stop each seed after this long (real)")
    p.add_argument("--seed", type=int, action="append", help="seed (repeatable; default 1)")
    p.add_argument("--ttl", type=int, default=60, help="reservation TTL in seconds (default 60)")
    p.add_argument("--check-every", type=int, default=10, help="full core invariant check period (ops)")
    p.add_argument("--no-restarts", action="store_true", help="never restart the extender")
    p.add_argument("--hostile", action="store_true", help="other tenants push past their entitlements")
    p.add_argument("--cells", action="store_true", help="the admin edits the hardware and quotas")
    args = p.parse_args(argv)
    failed = False
    for seed in args.seed or [1]:
        opts = Options(
            ops=args.ops,
            seconds=args.seconds,
            seed=seed,
            ttl=args.ttl,
            check_every=args.check_every,
            restarts=not args.no_restarts,
            progress=True,
            hostile=args.hostile,
            cells=args.cells,
        )
        report = run_soak(opts)
        print("\n".join(report.lines()), flush=True)
        failed = failed or report.violation_count > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
