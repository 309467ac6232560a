"""Leader election on a `coordination.k8s.io/v1` Lease, the protocol client-go's leaderelection uses.

Two schedulers deciding at once would hand the same GPUs out twice, so only the Lease holder serves
the verbs; a standby keeps its state warm from the watches and answers /readyz with 503, which keeps
the Service's endpoints (and so kube-scheduler's calls) on the leader.

A Lease is taken when its holder has not renewed it for `lease_seconds`, judged on this process's
own clock from when the record was last seen to change (never by comparing another machine's
timestamps, which may be skewed). Writes carry the resourceVersion read, so two candidates never
both win. A leader that cannot renew within `renew_deadline` stops leading; the service then exits
so that it comes back as a clean standby rather than acting on state it may no longer own.

Every attempt is cut at what is left of the renew deadline, as client-go runs each renewal under a
context with that deadline: the API server's client may wait for its own timeout several times
over (30 s a try, with retries), far past the Lease's 15 s, and a leader still waiting for its
renewal's answer when the Lease runs out would be a second leader. Any failure of an attempt, an
answer or none, is a failed attempt, never the end of the loop that renews.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from extender.kube.client import ApiError, AsyncKube, NoAnswerError
from extender.ops.background import wait_at_most

log = logging.getLogger("topogang.kube")


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    namespace: str
    name: str = "topogang-extender"
    lease_seconds: float = 15.0
    renew_deadline: float = 10.0
    retry_seconds: float = 2.0


def lease_path(namespace: str, name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


def micro_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: AsyncKube,
        settings: LeaseSettings,
        identity: str,
        *,
        clock: Callable[[], float],
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self.cfg = settings
        self.identity = identity
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.holder = ""  # the holder as last observed
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self.leading = False
        self.renewed_at = 0.0  # when the last attempt that held the Lease began (this clock)

    @property
    def path(self) -> str:
        return lease_path(self.cfg.namespace, self.cfg.name)

    def _spec(self, old: dict[str, Any] | None) -> dict[str, Any]:
        now = micro_time(self.wall())
        spec = dict(old or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if old else 0)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self.cfg.lease_seconds)),
            renewTime=now,
        )
        return spec

    async def try_acquire_or_renew(self) -> bool:
        began = self.clock()
        held = await self._try_acquire_or_renew()
        if held:
            self.renewed_at = began  # the Lease runs from no later than this
        return held

    async def _try_acquire_or_renew(self) -> bool:
        try:
            lease = await self.kube.request("GET", self.path)
        except NoAnswerError as err:
            log.warning("reading Lease %s failed: %s", self.path, err)
            return False
        except ApiError as err:
            if err.status != 404:
                log.warning("reading Lease %s failed: %s", self.path, err)
                return False
            lease = None
        if lease is None:
            spec = self._spec(None)
            body: dict[str, Any] = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.cfg.name, "namespace": self.cfg.namespace},
                "spec": spec,
            }
            try:
                await self.kube.request("POST", lease_path(self.cfg.namespace), body=body)
            except (ApiError, NoAnswerError) as err:
                log.info("creating Lease %s failed: %s", self.path, err)
                return False
            self._saw(self.identity, spec["renewTime"])
            return True
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        self._saw(holder, str(spec.get("renewTime") or ""))
        duration = float(spec.get("leaseDurationSeconds") or self.cfg.lease_seconds)
        if holder and holder != self.identity and self.clock() - self._observed_at < duration:
            return False
        mine = self._spec(spec)
        body = {**lease, "spec": mine}
        try:
            await self.kube.request("PUT", self.path, body=body)
        except NoAnswerError as err:
            log.warning("updating Lease %s failed: %s", self.path, err)
            return False
        except ApiError as err:
            if err.status != 409:
                log.warning("updating Lease %s failed: %s", self.path, err)
            return False
        self._saw(self.identity, mine["renewTime"])
        return True

    def _saw(self, holder: str, renew: str) -> None:
        self.holder = holder
        if self._observed != (holder, renew):
            self._observed = (holder, renew)
            self._observed_at = self.clock()

    async def attempt(self, within: float) -> bool:
        """One `try_acquire_or_renew`, given up after `within` seconds; any failure is a failed
        attempt, never the end of the loop that makes them."""
        try:
            return await wait_at_most(self.try_acquire_or_renew(), max(within, 0.0))
        except TimeoutError:
            log.warning("Lease %s: no answer within %.1fs", self.path, within)
        except Exception:
            log.exception("Lease %s: the attempt failed", self.path)
        return False

    async def acquire(self, on_wait: Callable[[], None] | None = None) -> None:
        """Return once this replica holds the Lease; `on_wait` after each attempt that failed."""
        while not await self.attempt(self.cfg.renew_deadline):
            if on_wait is not None:
                on_wait()
            await self.sleep(self.cfg.retry_seconds)
        self.leading = True
        log.info("leading: acquired Lease %s as %s", self.path, self.identity)

    async def hold(self) -> None:
        """Renew until a renewal has failed for `renew_deadline` since the last one that held began
        (each attempt is cut there); then return, leadership lost. Begins where `acquire` left off:
        the time spent starting to lead counts."""
        while True:
            await self.sleep(self.cfg.retry_seconds)
            left = self.cfg.renew_deadline - (self.clock() - self.renewed_at)
            if left > 0 and await self.attempt(left):
                continue
            lapsed = self.clock() - self.renewed_at >= self.cfg.renew_deadline
            if self.holder not in ("", self.identity) or lapsed:
                self.leading = False
                log.error("lost Lease %s (holder now %r)", self.path, self.holder)
                return

    def holds(self) -> bool:
        """Whether this replica may act on the cluster now: leading, and its last renewal that held
        began within `renew_deadline`. Asked at each write, not only when `hold` wakes: a process
        paused past its deadline (a VM freeze, CPU starvation, a long synchronous step) wakes with
        `leading` still set, and what it serves first would write beside the Lease's new holder."""
        return self.leading and self.clock() - self.renewed_at < self.cfg.renew_deadline

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown so a standby takes over at once, not after it expires."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = await self.kube.request("GET", self.path)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
            await self.kube.request("PUT", self.path, body={**lease, "spec": spec})
        except (ApiError, NoAnswerError) as err:
            log.warning("releasing Lease %s failed: %s", self.path, err)
