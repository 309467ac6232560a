"""`promoteWhenQuota` is a request for the priority promotion gives (`PROMOTED_PRIORITY`, 0), held to
the namespace's `maxPriority` like any other (`extender.gangs.entitlement`): a namespace kept to
opportunistic work may not opt in, whether its VC is its `tenants` entry's or its
`namespaceVirtualClusters` one, and a reload that lowers its `maxPriority` below 0 stops its gangs
being promoted, as a restart under the new rules rebuilds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from extender.gangs.entitlement import EntitlementError, grant
from extender.http import wire
from extender.http.reload import ConfigWatcher
from extender.http.verbs import Scheduler
from extender.kube.recovery import recover
from extender.standalone import EXAMPLE_CONFIG
from tests.extender.helpers import Clock, args, place, pod, run, spec
from tests.extender.test_entitlement import as_bound, config, make
from topology.core import Core
from topology.invariants import violations

# a namespace that may use VC nlp, at most at `{top}`: by a tenants entry, or as nlp's own namespace
GRANTS = {
    "lab": "  tenants:\n    lab: {{virtualClusters: [nlp], maxPriority: {top}}}\n",
    "nlp": "  tenants:\n    nlp: {{maxPriority: {top}}}\n",
}


async def fill_nlp(s: Scheduler) -> list[str]:
    """nlp's whole quota (3 nodes) in use by another namespace's gang; its pods' UIDs."""
    big = [pod(f"b{i}", f"big-{i}", "owner", spec("nlp", 8, 3, "owner/big")) for i in range(3)]
    for p in big:
        assert (await place(s, p))[1] is not None
    return [p["metadata"]["uid"] for p in big]


def opted_in(ns: str) -> dict[str, Any]:
    return pod("o", "opp", ns, spec("nlp", 8, priority=-1, promoteWhenQuota=True))


@pytest.mark.parametrize("ns", sorted(GRANTS))
def test_a_namespace_kept_to_opportunistic_work_may_not_opt_in_to_promotion(ns: str) -> None:
    async def go() -> None:
        s, evicted = make(config(GRANTS[ns].format(top=-1)))
        big = await fill_nlp(s)
        with pytest.raises(EntitlementError) as info:
            await s.request_of(wire.parse_pod(opted_in(ns)))
        assert info.value.field == "promoteWhenQuota"
        for words in (f"namespace {ns}", "maxPriority -1", "priority 0", "'nlp'", f"topogang.tenants.{ns}"):
            assert words in info.value.message, info.value.message
        r = await s.filter(args(opted_in(ns)))
        assert "User Error" in r["Error"] and "promoteWhenQuota" in r["Error"], r
        assert s.core.gang(f"{ns}/pod:opp") is None and evicted == []
        # without the opt-in it runs as a guest, and stays one when nlp's quota frees
        guest = pod("g", "guest", ns, spec("nlp", 8, priority=-1))
        assert (await place(s, guest))[1] is not None
        for uid in big:
            await s.pod_gone(uid)
        g = s.core.gang(f"{ns}/pod:guest")
        assert g is not None and g.priority == -1
        assert violations(s.core) == []

    run(go())


@pytest.mark.parametrize("ns", sorted(GRANTS))
def test_with_max_priority_zero_the_same_gang_is_promoted(ns: str) -> None:
    """The control: the rule is the cap, not the opt-in."""

    async def go() -> None:
        s, _ = make(config(GRANTS[ns].format(top=0)))
        big = await fill_nlp(s)
        assert (await place(s, opted_in(ns)))[1] is not None
        for uid in big:
            await s.pod_gone(uid)
        g = s.core.gang(f"{ns}/pod:opp")
        assert g is not None and g.priority == 0

    run(go())


def test_a_reload_that_lowers_max_priority_below_zero_stops_promotion_as_a_restart_does(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        path = tmp_path / "c.yaml"
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path.write_text(base + GRANTS["lab"].format(top=0), encoding="utf-8")
        s, _ = make(config(GRANTS["lab"].format(top=0)))
        watcher = ConfigWatcher(s, path, clock=Clock())
        big = await fill_nlp(s)
        opp = opted_in("lab")
        assert (await place(s, opp))[1] is not None
        path.write_text(base + GRANTS["lab"].format(top=-1), encoding="utf-8")
        assert await watcher.check() == "applied"
        assert any("lab/pod:opp is no longer promoted" in line for line in watcher.status.last_report)
        for uid in big:  # nlp's quota frees
            await s.pod_gone(uid)
        g = s.core.gang("lab/pod:opp")
        assert g is not None and g.priority == -1 and not g.request.promote_when_quota
        fresh = Core(config().spec)
        recover(
            fresh,
            [as_bound(s, opp)],
            now=0.0,
            entitle=lambda pr, q, held: grant(s.entitlement.rules, pr, q, held=held),
        )
        again = fresh.gang("lab/pod:opp")
        assert again is not None and not again.request.promote_when_quota and again.priority == -1
        assert violations(s.core) == []

    run(go())
