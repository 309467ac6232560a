"""Durable gang reservations: `GangReservation` objects kept in step with the core.

Written through at the moment a reservation is made (the verb awaits the write before it answers,
so kube-scheduler never binds or evicts for a reservation that exists only in memory; a lone pod
that preempts nobody is the exception, see `needs_write_through`), and diffed
against the core every second for the rest (a gang that became bound or went away has its object
deleted; a deadline that moved is updated). Read back once, when this replica starts leading.

A running gang a lazy preemption downgraded keeps (or gets) its object while it is downgraded,
written through with its preemptor's (`flush_new`): read back, it puts the downgrade on the gang
recovery adopted from its pods, which would otherwise be promoted at the next release that frees
its VC's quota, where before the restart it was left alone (`reservation_objects`, at the top).

A write that fails is logged and counted, never fails the verb: the reservation still holds in
memory, and the next sync retries it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from extender.gangs import reservation_objects as rsv
from extender.gangs.entitlement import may_run, withdraw_promotions
from extender.gangs.identity import split_key
from extender.gangs.podspec import is_enabled, spec_text
from extender.http import podrequests, wire
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from extender.kube.client import ApiError, AsyncKube, NoAnswerError
from extender.kube.opt_in import SPENT
from topology.decisions import UserError

log = logging.getLogger("topogang.kube")

SYNC_SECONDS = 1.0


class ReservationStore:
    """The objects of one namespace (the extender's own), mirrored from the scheduler's core."""

    def __init__(
        self,
        scheduler: Scheduler,
        kube: AsyncKube,
        namespace: str,
        *,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.s = scheduler
        self.kube = kube
        self.namespace = namespace
        self.wall = wall
        self.written: dict[str, rsv.Fingerprint] = {}  # object name -> fingerprint as stored
        self.write_lock = asyncio.Lock()
        self.failures = 0
        self.seen_id = 0  # gangs up to this id have been considered for a write-through
        self.may_act: Callable[[], bool] = lambda: True  # the Lease still held, at each write
        # a standby's, from its last `follow`: the gangs the leader lists, and the reservation it
        # last listed of each gang the core holds at that placement (kept while the core holds it)
        self.leader_gangs: set[str] = set()
        self.leader_places: dict[str, rsv.Restorable] = {}

    async def flush_new(self) -> None:
        """Write through the reservations made since the last call (O(1) when there are none), and
        the gangs a new gang lazily downgraded: kube-scheduler acts on the preemptor's at once, and
        a restart that found a downgraded reservation still on the VC's quota would restore it
        there, or one that runs not downgraded would promote it."""
        last = self.s.core.last_gang_id()
        if last == self.seen_id:
            return
        async with self.s.lock:
            core = self.s.core
            last = core.last_gang_id()
            start = self.seen_id if last > self.seen_id else 0  # a reload starts ids afresh
            self.seen_id = last
            # the new gangs, and those they may have downgraded (downgraded gangs are unsettled):
            # not a walk of every running gang, once per new gang
            made = core.gangs(since=start)
            both = {g.id: g for g in (*made, *core.gangs(unsettled=True))}
            gangs = [both[i] for i in sorted(both)]
            new = {g.name for g in made}
            # a new gang that downgraded others is written with them, whatever its size: a restart
            # must find the preemptor beside the gangs that gave their quota up for it
            downgraders = {g.downgraded_by for g in gangs if g.downgraded_by in new}
            fresh = [
                g.name
                for g in gangs
                if (g.id > start and (rsv.needs_write_through(g) or g.name in downgraders))
                or g.downgraded_by in new
                if rsv.needs_object(g)
            ]
        for name in fresh:
            await self.persist(name)

    # ------------------------------------------------------------------ desired state
    def _desired(self, only: str | None = None) -> dict[str, dict[str, Any]]:
        core = self.s.core
        now, wall = self.s.clock(), self.wall()
        # the gangs that need an object are unsettled ones (`needs_object`): not a walk of every gang
        one = core.gang(only) if only is not None else None
        gangs = core.gangs(unsettled=True) if only is None else [one] if one is not None else []
        return {
            rsv.object_name(g.name): rsv.encode(core, g, clock_now=now, wall_now=wall)
            for g in gangs
            if rsv.needs_object(g)
        }

    async def persist(self, gang: str) -> None:
        """Write one gang's reservation now (called by the verb that made it)."""
        async with self.s.lock:
            want = self._desired(gang)
        async with self.write_lock:
            for name, body in want.items():
                if self.written.get(name) != rsv.fingerprint(body):
                    await self._put(name, body)

    async def sync(self) -> None:
        """Bring every object in line with the core: create, update, delete."""
        async with self.s.lock:
            want = self._desired()
        async with self.write_lock:
            for name, body in want.items():
                if self.written.get(name) != rsv.fingerprint(body):
                    await self._put(name, body)
            for name in [n for n in self.written if n not in want]:
                await self._delete(name)

    async def run(self) -> None:
        while True:
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad round stop durability for good
                log.exception("syncing gang reservations failed")
            await asyncio.sleep(SYNC_SECONDS)

    # ------------------------------------------------------------------ writes
    async def _put(self, name: str, body: dict[str, Any]) -> None:
        if not self.may_act():
            return  # not this replica's to write now: the next sync, leading, writes it
        path = rsv.object_path(self.namespace, name)
        body = {**body, "metadata": {**body["metadata"], "namespace": self.namespace}}
        try:
            if name in self.written:
                current = await self.kube.request("GET", path)
                rv = ((current or {}).get("metadata") or {}).get("resourceVersion")
                body["metadata"]["resourceVersion"] = rv
                await self.kube.request("PUT", path, body=body)
            else:
                try:
                    await self.kube.request("POST", rsv.collection_path(self.namespace), body=body)
                except ApiError as err:
                    if err.status != 409:
                        raise
                    # left over by a previous leader: take it over with our content
                    current = await self.kube.request("GET", path)
                    body["metadata"]["resourceVersion"] = ((current or {}).get("metadata") or {}).get(
                        "resourceVersion"
                    )
                    await self.kube.request("PUT", path, body=body)
            self.written[name] = rsv.fingerprint(body)
        except (ApiError, NoAnswerError) as err:
            self.failures += 1
            self.s.metrics.reservation_writes.labels("error").inc()
            log.warning("gang reservation %s/%s not written: %s", self.namespace, name, err)
        else:
            self.s.metrics.reservation_writes.labels("ok").inc()

    async def _delete(self, name: str) -> None:
        if not self.may_act():
            return
        try:
            await self.kube.request("DELETE", rsv.object_path(self.namespace, name))
        except (ApiError, NoAnswerError) as err:
            if not isinstance(err, ApiError) or err.status != 404:
                self.failures += 1
                log.warning("gang reservation %s/%s not deleted: %s", self.namespace, name, err)
                return
        self.written.pop(name, None)

    # ------------------------------------------------------------------ a standby's
    async def leader_kept(self) -> list[rsv.Restorable] | None:
        """The reservations the leader persists now (a standby reads them; None: not read)."""
        try:
            listed, _ = await self.kube.list(rsv.collection_path(self.namespace))
        except (ApiError, NoAnswerError) as err:
            log.warning("a standby's read of gang reservations failed: %s", err)
            return None
        return [r for _, r in map(_read_back, listed) if not isinstance(r, rsv.BadReservationError)]

    def follow(self, kept: list[rsv.Restorable]) -> None:
        """Under the lock: each gang the leader still keeps, at the placement the standby holds,
        takes the leader's deadline (`Core.restore` of a gang known: the standby's copy, adopted
        from bind info, has the config's TTL, not the timeout the gang asked for)."""
        core, now, wall = self.s.core, self.s.clock(), self.wall()
        self.leader_gangs = {r.request.name for r in kept}
        # the reservation the leader last listed of a gang, kept while the core holds that gang: the
        # standby's expiry of it may come after the leader stopped listing it (let go, or whole)
        self.leader_places = {n: r for n, r in self.leader_places.items() if core.gang(n) is not None}
        for r in kept:
            g = core.gang(r.request.name)
            if g is None or not r.same_gang(core.placement_of(g)):
                continue
            self.leader_places[g.name] = r
            if g.deadline is None:
                continue
            core.restore(r.request, r.slots, now, rsv.deadline_of(r, clock_now=now, wall_now=wall))

    def made_whole(self, gang: str, listed: rsv.Restorable) -> bool:
        """Whether the core holds `gang` again, at (part of) the placement the leader listed for it
        (`listed`): the leader bound its other members (the watch shows them), it did not let it go."""
        g = self.s.core.gang(gang)
        return g is not None and not g.evicting and listed.same_gang(self.s.core.placement_of(g))

    # ------------------------------------------------------------------ start
    async def restore(self, pods: Iterable[Mapping[str, Any]] | None = None) -> list[str]:
        """Read every object back into the core (after bound pods were adopted, so a gang with a
        bound member is already there: it takes the object's deadline, the leader's, and a
        whole gang's object is dropped at the next sync unless the gang is downgraded). An object
        that records a downgrade puts it back on its gang (`_downgraded`); a whole gang's object is
        only that record, so it brings back no reservation when its gang runs no more. An object
        that cannot be restored is deleted; the gang places afresh. With `pods` (the listed pods),
        a reservation nothing is bound in and no listed pod may still claim is dropped too: its
        gang was released just before the restart or fail-over, faster than the sync deletes
        objects, and would otherwise hold its cells until its TTL for nobody. Report lines."""
        listed, _ = await self.kube.list(rsv.collection_path(self.namespace))
        # each object read once, outside the lock; higher priority first: a preemptor's reservation
        # comes back before its victim's, so a victim whose every pod went while no one led is not
        # restored on the GPUs it was preempted from (the preemptor restored over it would wait for
        # a victim with no pod until a TTL)
        listed = [o for o in listed if (o.get("metadata") or {}).get("name") != SPENT]  # no gang's
        items = sorted((_read_back(obj) for obj in listed), key=_restore_order)
        claimers: Claimers | None = None  # read from the pods once a reservation asks (at 60,000 pods,
        # seconds of a restart that has no reservation with nothing bound to restore)
        lines: list[str] = []
        restored = 0
        async with self.s.lock:
            core, now, wall = self.s.core, self.s.clock(), self.wall()
            for name, r in items:
                if isinstance(r, rsv.BadReservationError):
                    lines.append(f"gang reservation {name} unreadable, dropped: {r}")
                    self.written[name] = rsv.UNKNOWN
                    continue
                self.written[name] = rsv.UNKNOWN  # known to exist: the next sync rewrites or deletes it
                if not split_key(r.request.name)[0]:  # a global name: no pod names that gang any more
                    lines.append(f"gang reservation of {r.request.name} names no namespace, dropped")
                    continue
                deadline = rsv.deadline_of(r, clock_now=now, wall_now=wall)
                if core.gang(r.request.name) is not None:
                    # adopted from its bound members with a fresh TTL: it keeps the deadline it had
                    # (one past expires at the next sweep), so a restart does not extend it
                    core.restore(r.request, r.slots, now, deadline)
                    lines += self._downgraded(r)
                    continue
                if r.whole:
                    lines.append(f"downgrade record of {r.request.name} dropped: the gang runs no more")
                    continue
                if deadline is not None and deadline <= now:
                    lines.append(f"gang reservation of {r.request.name} expired while no one led, dropped")
                    continue
                if pods is not None:
                    claimers = claimers or Claimers.of(self.s, pods)
                if claimers is not None and not claimers.may_claim(r.request.name):
                    lines.append(f"gang reservation of {r.request.name} dropped: no pod asks for it any more")
                    continue
                got = core.restore(r.request, r.slots, now, deadline)
                if isinstance(got, str):
                    lines.append(f"gang reservation of {r.request.name} not restored: {got}")
                else:
                    restored += 1
                    lines += self._downgraded(r)
                    self.s.gang_ledger.placed(core, r.request.name, self.s.waiting_of)
            # adopted or restored from before a reload took their namespace's VC away: as the reload did
            for gang in withdraw_promotions(core, self.s.entitlement.rules):
                lines.append(f"gang {gang} is not promoted (promoteWhenQuota): its namespace lost its VC")
        lines.insert(0, f"restored {restored} of {len(items)} persisted gang reservations")
        return lines

    def _downgraded(self, r: rsv.Restorable) -> list[str]:
        """Put the downgrade an object records back on its gang, now in the core (under the lock)."""
        name, by = r.request.name, r.downgraded_by
        g = self.s.core.gang(name)
        if by is None or g is None:
            return []
        if not r.same_gang(self.s.core.placement_of(g)):
            return [f"downgrade record of {name} not applied: the gang of that name runs elsewhere now"]
        if not self.s.core.keep_downgraded(name, by):
            return []
        return [f"gang {name} stays downgraded to opportunistic by {by}, as recorded: not promoted"]


def _read_back(obj: Mapping[str, Any]) -> tuple[str, rsv.Restorable | rsv.BadReservationError]:
    """A listed object's name, and what it records or why it cannot be read."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    try:
        return name, rsv.decode(obj)
    except rsv.BadReservationError as err:
        return name, err


def _restore_order(item: tuple[str, rsv.Restorable | rsv.BadReservationError]) -> int:
    r = item[1]
    return 0 if isinstance(r, rsv.BadReservationError) else -r.request.priority


class Claimers:
    """Which gangs the listed pods may still claim a slot of: the gang each live pod's own spec
    names, when its namespace may make that request under the entitlements in force (after a
    restart a bind reads the request afresh and holds it to them). A pod whose gang its spec alone
    does not name (a convention's: a PodGroup, YuniKorn,
    Spark, a GPU pod; a task shaped by its Framework object) might be of any gang of its
    namespace, so such a namespace keeps every reservation."""

    def __init__(self) -> None:
        self.gangs: set[str] = set()
        self.unsure: set[str] = set()  # namespaces with a pod whose gang cannot be read here

    @classmethod
    def of(cls, s: Scheduler, pods: Iterable[Mapping[str, Any]]) -> Claimers:
        out = cls()
        for pod in pods:
            if kpods.finished(pod) or kpods.deleting(pod):
                continue
            if not is_enabled(pod) or not may_run(s.entitlement.rules.tenant(kpods.namespace(pod))):
                continue  # not topogang's, or of a namespace that may run nothing: claims nothing
            try:
                wp = wire.parse_pod(pod)
                pr = podrequests.explained(s, wp) if spec_text(pod)[1] is not None else None
            except (wire.WireError, UserError):
                continue  # a pod that cannot be read, or asks what its namespace may not: claims nothing
            except Exception:  # whatever else its content provokes: this pod only, and unsure
                out.unsure.add(kpods.namespace(pod))
                continue
            if pr is None or podrequests.framework_shaped(pr) is not None:
                out.unsure.add(wp.namespace)
            else:
                out.gangs.add(pr.request.name)
        return out

    def may_claim(self, gang: str) -> bool:
        return gang in self.gangs or split_key(gang)[0] in self.unsure
