"""`vc_order.Holders`, the per-VC index of the waits that hold their VC back (and the per-namespace
one of the waits its bound on GPUs reserved unbound holds), answers as a scan of every waiting gang
would, whatever the order of waits noted and ended, and whatever the namespaces may use
(hypothesis)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.gangs.entitlement import Entitlements
from extender.gangs.podspec import PodRequest
from extender.gangs.vc_order import Holders, shown
from extender.gangs.waiting import Waiting
from topology.decisions import WaitCode, WaitReason

GANGS = [f"{ns}/g{i}" for ns in ("nlp", "vision") for i in range(2)]

waits = st.builds(
    lambda gang, vc, priority, since, seen, holds, queued, bound: Waiting(
        gang,
        vc,
        priority,
        1,
        WaitReason(WaitCode.TENANT_LIMIT if bound else WaitCode.INSUFFICIENT_QUOTA, vc, "m"),
        since,
        since + seen,
        holds and not bound,  # held by its namespace's bound: it holds no VC (`turned_away.NOT_HOLDING`)
        queued,
    ),
    st.sampled_from(GANGS),
    st.sampled_from(["nlp", "vision"]),
    st.sampled_from([-1, 0, 100]),
    st.integers(0, 20).map(float),
    st.integers(0, 20).map(float),
    st.booleans(),
    st.one_of(st.none(), st.integers(-5, 20).map(float)),  # its pods' creation, when they carry one
    st.booleans(),  # [TenantLimit]: its namespace's bound on GPUs reserved unbound holds it
)
steps = st.lists(
    st.one_of(st.tuples(st.just("wait"), waits), st.tuples(st.just("end"), st.sampled_from(GANGS)))
)


# open: every namespace may take every VC's quota; closed: only nlp, and only VC nlp's (vision's
# gangs are guests wherever they wait, nlp's are guests in VC vision)
RULES = {"open": Entitlements.open(), "closed": Entitlements({}, {"nlp": "nlp"}, "opportunistic")}


def may_take(closed: bool, gang: str, vc: str) -> bool:
    return not closed or gang.split("/")[0] == vc == "nlp"


def scan(
    waiting: dict[str, Waiting],
    gang: str,
    ns: str,
    vc: str,
    priority: int,
    now: float,
    since: float,
    closed: bool,
) -> str | None:
    """The reference: every waiting gang looked at."""
    mine = waiting.get(gang)
    key = (mine.order if mine is not None else now, gang)
    ahead = [
        w
        for w in waiting.values()
        if (
            (w.holds and w.vc == vc and may_take(closed, w.gang, w.vc))
            # held by its namespace's bound: ahead of the namespace's later gangs, whatever their VC
            or (w.reason.code is WaitCode.TENANT_LIMIT and w.gang.split("/")[0] == ns)
        )
        and w.gang != gang
        and w.priority >= priority
        and w.last_seen >= since
        and (w.order, w.gang) < key
    ]
    return shown(min(ahead, key=lambda w: (w.order, w.gang)), ns, now) if ahead else None


@settings(max_examples=600, deadline=None)
@given(
    steps,
    st.sampled_from(GANGS),
    st.sampled_from(["nlp", "vision"]),
    st.sampled_from([-1, 0, 100]),
    st.sampled_from(sorted(RULES)),
)
def test_the_index_answers_as_a_scan_of_every_wait(
    ops: list[tuple[str, Any]], gang: str, vc: str, priority: int, rules: str
) -> None:
    waiting: dict[str, Waiting] = {}
    holders = Holders()
    for kind, x in ops:  # as the verbs do: `_note_wait` and `_stop_waiting`
        if kind == "wait":
            old = waiting.get(x.gang)
            waiting[x.gang] = x
            holders.note(x, old)
        elif (w := waiting.pop(x, None)) is not None:
            holders.drop(x, w.vc)
    ns = gang.split("/")[0]
    # what `ahead_of` reads of a pod's request: its gang, namespace, VC and priority (and its UID
    # and creation, for when it joined the queue)
    pr = cast(
        PodRequest,
        SimpleNamespace(
            uid="u", gang=gang, namespace=ns, request=SimpleNamespace(vc=vc, priority=priority), created=None
        ),
    )
    for now, since in ((10.0, 0.0), (25.0, 12.0), (40.0, 30.0)):
        got = holders.ahead_of(waiting, pr, now, since, RULES[rules])
        assert got == scan(waiting, gang, ns, vc, priority, now, since, rules == "closed")
