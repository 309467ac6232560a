"""A reservation that runs nothing, outbid by a preemptor: the core lets it go inside the preemption,
and the edge hears of it as of any release (the ledger, the release counter, the gang's Events),
without learning the preemptor's name where another namespace would read it."""

from __future__ import annotations

from typing import Any

from extender.http import wire
from extender.kube.events import ObjectRef
from extender.kube.service import gang_events
from tests.extender.helpers import args, pod, run, spec
from tests.extender.test_entitlement import config, make
from topology.preemption import OUTBID

# rival may use VC vision at any priority: the admin lets it preempt vision's gangs, not read their
# names nor have vision read its own
TENANTS = "  defaultEntitlement: opportunistic\n  tenants:\n    rival: {virtualClusters: [vision]}\n"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def record(self, ref: ObjectRef, reason: str, message: str, *, warning: bool = False) -> bool:
        self.events.append((ref.namespace, ref.name, reason, message))
        return True


def members(ns: str, prefix: str, name: str, priority: int = 0) -> list[dict[str, Any]]:
    text = spec("vision", 8, 6, name, priority=priority) if priority else spec("vision", 8, 6, name)
    return [pod(f"{prefix}{i}", f"{name}-{i}", ns, text) for i in range(6)]


def test_an_outbid_reservation_is_released_at_the_edge_without_the_preemptors_name() -> None:
    async def go() -> None:
        s, _evicted = make(config(TENANTS))
        rec = Recorder()
        s.gang_ledger.on_transition = gang_events(rec)  # type: ignore[arg-type]
        victim = members("vision", "v", "victim")
        assert (await s.filter(args(victim[0])))["NodeNames"]  # vision reserves its whole quota
        assert s.gang_ledger.records["vision/victim"].phase.value == "Reserved"
        top = members("rival", "t", "project-nightingale", priority=900)
        await s.filter(args(top[0]))
        assert s.core.gang("vision/victim") is None  # outbid: it ran nothing
        # the ledger no longer shows a reservation the core let go
        assert "vision/victim" not in s.gang_ledger.records
        lines = [ln for ln in s.metrics.render().decode().splitlines() if "gang_releases_total{" in ln]
        assert lines == [f'topogang_gang_releases_total{{reason="{OUTBID}"}} 1.0'], lines
        told = [e for e in rec.events if e[0] == "vision" and "cancelled" in e[3]]
        assert told and all("rival" not in e[3] and "nightingale" not in e[3] for e in told), told
        assert all("nightingale" not in e[3] for e in rec.events if e[0] == "vision")

    run(go())


def test_the_preempt_verb_releases_what_it_outbids_too() -> None:
    """kube-scheduler's preempt verb asks the core the same question as a preempting filter."""

    async def go() -> None:
        s, _evicted = make(config(TENANTS))
        victim = members("vision", "v", "victim")
        assert (await s.filter(args(victim[0])))["NodeNames"]
        top = members("rival", "t", "project-nightingale", priority=900)
        body = {"Pod": top[0], "NodeNameToVictims": {}, "NodeNameToMetaVictims": {}}
        await s.preempt(wire.parse_preemption_args(body))
        assert s.core.gang("vision/victim") is None
        assert "vision/victim" not in s.gang_ledger.records
        assert f'reason="{OUTBID}"' in s.metrics.render().decode()

    run(go())
