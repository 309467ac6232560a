"""Hot reload: apply an edited topology/quota config without a restart.

HiveD reloads by exiting, which loses every preemption in flight. Here the config file (or the
ConfigMap mounted as one — Kubernetes swaps a symlink, so the content is compared, not inotify
events) is polled; a changed file is validated first, and only a valid one is applied, by the
core's work-preserving reconfiguration under the scheduler's lock, so every running pod keeps its
GPUs. An invalid file is rejected with its errors (log, metric, `GET /v1/config`) and the running
config stays in force.

A valid file that would cost a running gang GPUs or its guarantee (a node with running pods removed,
a VC shrunk below what it runs: `ReconfigureReport.impacts`, the judgement `topogang diff --against`
prints) is refused the same way, unless the file `confirm-capacity-loss` beside the config (the
chart's value `confirmCapacityLoss`) holds this config's digest (`config.against.config_digest`,
printed by the refusal and by `diff --against`). A digest, not a yes: a confirmation left in place
confirms only the edit it names, never the next one. A refused file is judged again when it or the
confirmation changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from config.against import CONFIRM_FILE, config_digest
from config.load import ConfigError, load_config_bytes
from extender.gangs import disruption
from extender.gangs.entitlement import withdraw_promotions
from extender.http.verbs import Scheduler
from extender.ops.background import every
from topology.core import Core
from topology.reconfigure import GangImpact, reconfigure

log = logging.getLogger("topogang.reload")
POLL_SECONDS = 5.0
POLL_ENV = "TOPOGANG_CONFIG_POLL_SECONDS"  # how often the file is checked (default 5 s)
BIND_WAIT_SECONDS = 10.0  # how long a reload waits for the Bindings being written (`_no_binding`)


@dataclass(slots=True)
class ReloadStatus:
    file: str
    applied_hash: str
    applied_at: float | None = None
    last_result: str = "initial"  # "initial", "applied", "rejected", "refused", "unreadable"
    last_errors: list[str] = field(default_factory=list)
    last_report: list[str] = field(default_factory=list)
    confirm_file: str = ""
    refused_digest: str = ""  # the digest that would confirm the refused config
    applied_text: str = ""  # the config in force, for `topogang diff --against`

    def to_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "appliedHash": self.applied_hash,
            "appliedAt": self.applied_at,
            "lastResult": self.last_result,
            "lastErrors": self.last_errors,
            "lastReport": self.last_report,
            "confirmFile": self.confirm_file,
            "refusedDigest": self.refused_digest,
            "config": self.applied_text,
        }


def read_confirmation(config_file: str | Path) -> str:
    """The digest the admin confirmed a capacity loss for: `confirm-capacity-loss` beside the config
    (the chart's ConfigMap key), or "" when there is none."""
    try:
        path = Path(config_file).parent / CONFIRM_FILE
        return path.read_text(encoding="utf-8", errors="replace").strip()[:64]
    except OSError:
        return ""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class ConfigWatcher:
    """Polls one config file and applies valid changes to the scheduler's core."""

    def __init__(
        self,
        scheduler: Scheduler,
        path: str | Path,
        *,
        clock: Callable[[], float],
        interval: float | None = None,
        follow_ttl: bool = True,
    ) -> None:
        self.scheduler = scheduler
        # the reservations' TTL follows `topogang.reservationTtlSeconds` (not when the caller set its own)
        self.follow_ttl = follow_ttl
        self.path = Path(path)
        self.clock = clock
        self.interval = interval if interval is not None else float(os.environ.get(POLL_ENV, POLL_SECONDS))
        self.confirm_path = self.path.parent / CONFIRM_FILE
        data = self._read()
        self.status = ReloadStatus(str(self.path), _digest(data) if data is not None else "")
        self.status.confirm_file = str(self.confirm_path)
        self.status.applied_text = data.decode("utf-8", "replace") if data is not None else ""
        self.rejected_hash = ""
        self.refused: tuple[str, str] | None = None  # (file hash, confirmation) last refused
        self.on_result: Callable[[str, list[str]], None] | None = None  # e.g. a Kubernetes Event
        # (old core, new core), under the lock right after the swap: what the edge keeps per node
        # follows the new config before any verb reads it (Kubernetes: `extender.kube.node_changes`)
        self.on_applied: Callable[[Core, Core], None] | None = None
        self.outcomes = Counter(
            "topogang_config_reloads",
            "Config changes seen, by result (applied, rejected, refused: it would cost running gangs"
            " GPUs or their guarantee and was not confirmed, unreadable).",
            ["result"],
            registry=scheduler.metrics.registry,
        )

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def _confirmation(self) -> str:
        return read_confirmation(self.path)

    async def check(self) -> str | None:
        """Apply the file if it changed; return the result, or None when nothing changed."""
        data = self._read()
        if data is None:
            if self.status.last_result != "unreadable":
                self._record("unreadable", [f"{self.path}: cannot read the config file"])
            return "unreadable"
        current = _digest(data)
        if current == self.status.applied_hash and self.status.last_result not in ("initial", "applied"):
            self._record("applied", [])  # the file in force is back after a rejected or refused edit
            return "applied"
        if current in (self.status.applied_hash, self.rejected_hash):
            return None
        confirmation = self._confirmation()
        if self.refused == (current, confirmation):
            return None  # reported once, not on every poll
        try:
            # the bytes just hashed, not the file read again: an update landing in between would be
            # applied under the hash and text of the one before it
            loaded = await asyncio.to_thread(load_config_bytes, data, str(self.path))
        except ConfigError as err:
            self.rejected_hash = current  # reported once, not on every poll
            self._record("rejected", err.lines())
            return "rejected"
        except (MemoryError, RecursionError) as err:  # a config too large to load: never retried
            self.rejected_hash = current
            self._record("rejected", [f"{self.path}: too large to load ({type(err).__name__})"])
            return "rejected"
        digest = config_digest(loaded)
        async with self._no_binding():
            new_core, report = reconfigure(self.scheduler.core, loaded.spec, self.clock())
            if report.loses_capacity and confirmation != digest:
                self.refused = (current, confirmation)
                self.status.refused_digest = digest
                self._record("refused", self._refusal(report.impacts, confirmation, digest))
                return "refused"
            read_with = (self.scheduler.namespace_vcs, self.scheduler.ttl_seconds, self.scheduler.max_pods)
            old, self.scheduler.core = self.scheduler.core, new_core
            self.scheduler.namespace_vcs = dict(loaded.extras.namespace_virtual_clusters)
            bounds = self.scheduler.entitlement.rules.bounds()
            self.scheduler.entitlement.configure(loaded.extras)  # the serve flag's mode stays
            queueing, self.scheduler.vc_queueing = self.scheduler.vc_queueing, loaded.extras.vc_queueing
            if queueing != loaded.extras.vc_queueing or bounds != self.scheduler.entitlement.rules.bounds():
                # gangs queued behind an older one, or held by their namespace's bound, may go now
                self.scheduler.requeue.freed()
            ttl = float(loaded.extras.reservation_ttl_seconds)
            ttl_was = self.scheduler.ttl_seconds
            if self.follow_ttl:
                self.scheduler.ttl_seconds = ttl
            if read_with != (
                self.scheduler.namespace_vcs,
                self.scheduler.ttl_seconds,
                self.scheduler.max_pods,
            ):
                self.scheduler.pods.epoch += 1  # requests read under the old config are read again
            withdrawn = withdraw_promotions(new_core, self.scheduler.entitlement.rules)
            self.scheduler.gang_ledger.rebased(new_core)
            if self.on_applied is not None:
                self.on_applied(old, new_core)
        self.status.applied_hash = current
        self.status.applied_text = data.decode("utf-8", "replace")
        self.status.refused_digest = ""
        self.refused = None
        self.status.applied_at = self.clock()
        self.status.last_report = report.lines() + [
            f"gang {g} is no longer promoted (promoteWhenQuota): its namespace may no longer take its "
            "VC's quota"
            for g in withdrawn
        ]
        if self.follow_ttl and ttl != ttl_was:
            self.status.last_report.append(
                f"reservationTtlSeconds {ttl_was:g} -> {ttl:g}: for gangs reserved from now on (a gang "
                "reserved already keeps its deadline)"
            )
        self._record("applied", [])
        if report.evict and self.scheduler.evictor is not None:
            await self.scheduler.evictor(
                report.evict,
                disruption.off_placement("its gang was not whole and a config change took out its node"),
            )
        log.info(
            "config %s applied: %s",
            self.path,
            "; ".join(self.status.last_report) or "no running gang affected",
        )
        return "applied"

    @asynccontextmanager
    async def _no_binding(self) -> AsyncIterator[None]:
        """The scheduler's lock, taken while no Binding is being written. A bind claims its slot
        under the lock and writes the Binding outside it: a core swapped in between would not know
        the pod the API is about to show bound, and when the edit takes its node out and a later
        one puts it back before the watch brings the pod, another pod could be given its GPUs.
        Binds are quick; after `BIND_WAIT_SECONDS` of them the reload goes ahead all the same."""
        lock, deadline = self.scheduler.lock, asyncio.get_running_loop().time() + BIND_WAIT_SECONDS
        while True:
            await lock.acquire()
            if not self.scheduler.inflight or asyncio.get_running_loop().time() >= deadline:
                break
            lock.release()
            await asyncio.sleep(0.05)
        try:
            yield
        finally:
            lock.release()

    def _refusal(self, impacts: list[GangImpact], confirmation: str, digest: str) -> list[str]:
        """Why a valid config was refused, and how to confirm it."""
        lines = [i.text() for i in impacts]
        if confirmation:
            lines.append(f"{self.confirm_path} confirms {confirmation}, not this config ({digest})")
        lines.append(
            f"to apply it anyway, write {digest} to {self.confirm_path} "
            f"(Helm: --set-string confirmCapacityLoss={digest})"
        )
        return lines

    def _record(self, result: str, errors: list[str]) -> None:
        if result != "applied":
            for line in errors:
                log.error("config reload %s: %s", result, line)
        # what is remembered to report a file once holds only while that report is the last word
        if result != "rejected":
            self.rejected_hash = ""
        if result != "refused":
            self.refused = None
        self.status.last_result = result
        self.status.last_errors = errors
        self.outcomes.labels(result).inc()
        if self.on_result is not None:
            self.on_result(result, errors)

    async def run(self) -> None:
        await every(self.interval, self.check, "config reload")  # a reload bug never stops the extender

    def route(self) -> Route:
        async def config_status(request: Request) -> Response:
            return JSONResponse(self.status.to_dict())

        return Route("/v1/config", config_status, methods=["GET"])
