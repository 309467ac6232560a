"""A Framework deleted and re-created under its name: FrameworkController gives the new object a new
`FC_FRAMEWORK_UID` and starts its attempt IDs again at 0, so its attempt numbers say nothing against
the old object's. Its pods supersede the old object's attempt (let go and evicted as any superseded
attempt), the barrier's `?attempt=` of the new object resolves, and the old object's attempts are
stale from then on, whatever their numbers. Without a UID on either side, numbers decide as before.
The two objects never live at once, but their pods can: a restart that lists both takes the younger
object's as current whatever the listing order, and a filtered pod older than the current object's
is stale.
"""

from __future__ import annotations

import asyncio
from typing import Any

from extender.gangs.disruption import ATTEMPT_SUPERSEDED, Disruption
from extender.gangs.ledger_records import Phase, Record, Seen
from tests.extender.helpers import Clock, args, place, scheduler
from tests.ledger.fc import fc_pod
from tests.ledger.test_ledger_phases import World

OLD, NEW = "uid-fw-old", "uid-fw-new"


def fw_pod(attempt: str, fw_uid: str | None, role: str = "ps", index: int = 0, **kw: Any) -> dict[str, Any]:
    """A task pod of framework ml/tf of Framework object `fw_uid` (None: the pod carries no UID)."""
    p = fc_pod("ml", "tf", role, index, attempt=attempt, **kw)
    ann = p["metadata"]["annotations"]
    if fw_uid is None:
        del ann["FC_FRAMEWORK_UID"]
    else:
        ann["FC_FRAMEWORK_UID"] = fw_uid
    p["metadata"]["uid"] = f"{fw_uid}-{attempt}-{role}-{index}"
    return p


def test_a_recreated_framework_supersedes_the_old_object_whatever_its_attempt_number() -> None:
    w = World()
    old = w.seen(fw_pod("2_cm-old", OLD))
    w.place(old)
    new_pod = fw_pod("0_cm-new", NEW)
    new = w.req(new_pod)
    assert w.ledger.attempt(new, new_pod) == Seen(superseded=old.gang)  # asked before the filter's call
    assert w.ledger.seen(new, new_pod) == Seen(superseded=old.gang)
    released = w.core.delete_gang(old.gang)
    assert released is not None
    w.ledger.released(w.core, released, w.wait_of)
    got = w.ledger.resolve(w.core, "ml", "tf", "0_cm-new")
    assert isinstance(got, Record) and got.gang == new.gang and got.ident.framework_uid == NEW
    assert w.ledger.resolve(w.core, "ml", "tf", None) is got
    stale = w.ledger.resolve(w.core, "ml", "tf", "2_cm-old")  # the old object's barrier: 409
    assert isinstance(stale, str) and "re-created" in stale and "0_cm-new" in stale
    # a late pod of the old object is stale, whatever its number: it never takes the name back
    late_pod = fw_pod("3_cm-old", OLD, "worker", 1)
    late = w.req(late_pod)
    assert w.ledger.attempt(late, late_pod).stale is not None
    assert w.ledger.seen(late, late_pod).stale is not None
    assert w.ledger.frameworks[("ml", "tf")].gang == new.gang
    # the new object's own next attempt supersedes it as any attempt does; the old one stays stale
    next_pod = fw_pod("1_cm-new2", NEW)
    assert w.ledger.seen(w.req(next_pod), next_pod) == Seen(superseded=new.gang)
    assert isinstance(w.ledger.resolve(w.core, "ml", "tf", "2_cm-old"), str)
    assert isinstance(w.ledger.resolve(w.core, "ml", "tf", "0_cm-new"), str)


def test_without_a_framework_uid_on_either_side_attempt_numbers_decide() -> None:
    for old_uid, new_uid in ((OLD, None), (None, NEW), (None, None)):
        w = World()
        old = w.seen(fw_pod("2_cm-old", old_uid))
        w.place(old)
        new_pod = fw_pod("0_cm-new", new_uid)
        seen = w.ledger.seen(w.req(new_pod), new_pod)
        assert seen.stale is not None and "superseded by attempt 2_cm-old" in seen.stale, (old_uid, new_uid)
        assert isinstance(w.ledger.resolve(w.core, "ml", "tf", "0_cm-new"), str)


def test_after_a_restart_the_object_being_deleted_is_not_taken_as_current() -> None:
    """A restart lists the deleted object's pods (being deleted by the garbage collector) beside the
    re-created one's: in either order, the framework's current attempt is the re-created one's."""
    for old_first in (True, False):
        old_pod, new_pod = fw_pod("2_cm-old", OLD, roles={"ps": 1}), fw_pod("0_cm-new", NEW, roles={"ps": 1})
        old_pod["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
        w = listed_together(old_pod, new_pod, old_first)
        got = w.ledger.resolve(w.core, "ml", "tf", None)
        assert isinstance(got, Record) and got.ident.framework_uid == NEW, old_first
        got = w.ledger.resolve(w.core, "ml", "tf", "0_cm-new")
        assert isinstance(got, Record) and got.ident.attempt == "0_cm-new", old_first


def test_the_filter_takes_a_recreated_frameworks_pods_while_the_old_one_is_a_tombstone() -> None:
    """The old object's attempt expired (its tombstone lives 20 minutes) and the Framework was
    deleted and re-created: its pods are placed at once and its barrier's attempt is known."""

    async def go() -> None:
        clock = Clock(1000.0)
        s = scheduler(clock=clock, ttl_seconds=60.0)
        old = fw_pod("2_cm-old", OLD, "worker", 0, roles={"worker": 2})
        assert (await s.filter(args(old))).get("NodeNames")
        clock.t += 120
        assert [r.gang for r in await s.expire()] == ["ml/tf/2_cm-old"]
        await s.pod_gone(old["metadata"]["uid"])
        assert s.gang_ledger.records["ml/tf/2_cm-old"].phase is Phase.EXPIRED
        new = fw_pod("0_cm-new", NEW, "worker", 0, roles={"worker": 2})
        answer = await s.filter(args(new))
        assert answer.get("NodeNames"), answer
        got = s.gang_ledger.resolve(s.core, "ml", "tf", "0_cm-new")
        assert isinstance(got, Record) and got.gang == "ml/tf/0_cm-new"

    asyncio.run(go())


def test_a_placed_old_objects_gang_is_let_go_and_its_pods_evicted_as_superseded() -> None:
    async def go() -> None:
        evicted: list[tuple[list[str], Disruption]] = []

        async def evict(uids: list[str], why: Disruption) -> None:
            evicted.append((list(uids), why))

        s = scheduler(evictor=evict)
        old = fw_pod("2_cm-old", OLD, "worker", 0, roles={"worker": 2})
        _, node = await place(s, old)
        assert node is not None
        new = fw_pod("0_cm-new", NEW, "worker", 0, roles={"worker": 2})
        answer = await s.filter(args(new))
        assert answer.get("NodeNames"), answer
        assert s.core.gang("ml/tf/2_cm-old") is None and s.core.gang("ml/tf/0_cm-new") is not None
        for _ in range(10):
            await asyncio.sleep(0)  # the eviction runs in the background
        assert [(uids, why.reason) for uids, why in evicted] == [
            ([old["metadata"]["uid"]], ATTEMPT_SUPERSEDED)
        ]

    asyncio.run(go())


def listed_together(old: dict[str, Any], new: dict[str, Any], old_first: bool) -> World:
    """A restart lists the bound pods of both objects (each its own gang), in the order given."""
    w = World()
    for p in (old, new):
        pr = w.req(p)
        w.core.reserve(pr.request, w.clock())
        w.core.claim(pr.gang, pr.uid, pr.leaf_number, w.clock(), slot_key=pr.slot_key, pod_name=pr.name)
    for p in (old, new) if old_first else (new, old):
        w.ledger.observe(w.core, p, w.wait_of)
    return w


def created(p: dict[str, Any], at: str) -> dict[str, Any]:
    p["metadata"]["creationTimestamp"] = at
    return p


def test_after_a_restart_pods_of_two_objects_neither_deleted_the_younger_object_is_current() -> None:
    """Two Framework objects of one name never live at once, but the deleted one's pods can (the
    garbage collector deletes them after their owner; an orphaning deletion never), unmarked. A
    restart lists them beside the re-created object's, by name: in either order the current attempt
    is the younger object's, its barrier's `?attempt=` is served, the older one's is told 409, and a
    late pod of the older is stale. Pod names differ (two pods of one name cannot both exist): here
    the older object had a second worker the re-created one has not."""
    states = []
    for old_first in (True, False):
        old = created(fw_pod("2_cm-old", OLD, "worker", 1, roles={"worker": 2}), "2030-01-01T00:00:00Z")
        new = created(fw_pod("0_cm-new", NEW, "worker", 0, roles={"worker": 1}), "2030-01-01T00:05:00Z")
        w = listed_together(old, new, old_first)
        got = w.ledger.resolve(w.core, "ml", "tf", None)
        assert isinstance(got, Record) and got.ident.framework_uid == NEW, old_first
        assert w.ledger.resolve(w.core, "ml", "tf", "0_cm-new") is got, old_first
        stale = w.ledger.resolve(w.core, "ml", "tf", "2_cm-old")
        assert isinstance(stale, str) and "re-created" in stale, (old_first, stale)
        late = created(fw_pod("2_cm-old", OLD, "worker", 0, roles={"worker": 2}), "2030-01-01T00:06:00Z")
        assert w.ledger.attempt(w.req(late), late).stale is not None, old_first
        states.append(w.ledger.frameworks[("ml", "tf")])
    assert states[0] == states[1]  # one state whatever the listing order


def test_pods_of_two_objects_created_within_one_second_are_ordered_by_object_uid() -> None:
    """The timestamps' resolution is a second: within it nothing says which object is younger, so
    the object UID decides, the same way in either listing order."""
    winners = set()
    for old_first in (True, False):
        at = "2030-01-01T00:00:00Z"
        old = created(fw_pod("2_cm-old", OLD, "worker", 1, roles={"worker": 2}), at)
        new = created(fw_pod("0_cm-new", NEW, "worker", 0, roles={"worker": 1}), at)
        w = listed_together(old, new, old_first)
        got = w.ledger.resolve(w.core, "ml", "tf", None)
        assert isinstance(got, Record)
        winners.add(got.ident.framework_uid)
    assert winners == {max(OLD, NEW)}


def test_a_filtered_pod_older_than_the_current_objects_is_stale() -> None:
    """The running path: a pod of the re-created object is filtered after the old object's, so it is
    younger and supersedes; a pod of the old object created before the current object's (one left
    pending when its Framework was deleted, say) is stale, not the newest, whatever order they are
    filtered in."""
    w = World()
    new = created(fw_pod("0_cm-new", NEW, "worker", 0, roles={"worker": 1}), "2030-01-01T00:05:00Z")
    current = w.seen(new)
    orphan = created(fw_pod("2_cm-old", OLD, "worker", 1, roles={"worker": 2}), "2030-01-01T00:00:00Z")
    assert w.ledger.attempt(w.req(orphan), orphan).stale is not None
    assert w.ledger.seen(w.req(orphan), orphan).stale is not None
    assert w.ledger.frameworks[("ml", "tf")].gang == current.gang
    newest = created(fw_pod("0_cm-newest", "uid-fw-newest", "worker", 0), "2030-01-01T00:09:00Z")
    assert w.ledger.seen(w.req(newest), newest).superseded == current.gang
