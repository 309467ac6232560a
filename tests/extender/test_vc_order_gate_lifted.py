"""A gang kept out of its VC's StrictFIFO queue behind a scheduling gate of its owner's (pod owners
may remove gates, never add them back) takes its place in the queue when the gate is lifted, not at
its pods' creationTimestamp: otherwise a tenant would buy the head of a shared VC's queue by keeping
a whole gang out of it and letting it in later, and every gang of the VC that had waited for room
since (another team's) would be answered `[Queued]` behind it. `vc_order` puts a gang at its
newest pod's creation ("creating one pod early and the rest later buys no place"), no earlier than
the moment the watch saw such a gate go (`ClusterSync._let_in`, `Holders.askable`)."""

from __future__ import annotations

from typing import Any, cast

from extender.kube.client import pod_path
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import until
from tests.extender.test_kube_vc_order import NLP, cluster_on, reasons, start_on, submit

RIVAL = "speech"  # another team, also allowed VC nlp (the example config has no `tenants`)
HOLD = {"name": "example.com/hold"}  # a gate of the tenant's own


def known(r: Any) -> dict[str, Any]:
    """The pods the replica's watch holds (`ClusterSync.pods`, behind its pod lookup)."""
    return cast(Any, r.service.pod_source).__self__.pods  # type: ignore[no-any-return]


def test_a_gang_let_in_late_by_its_owner_does_not_jump_ahead_of_gangs_that_waited_meanwhile() -> None:
    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        r = await start_on(kube, clock)
        await r.place(submit(kube, "o0", "one", spec(NLP, 8)))  # 16 of nlp's 24 GPUs left

        # t0: the rival team stockpiles a whole 3 x 8-GPU gang behind its own gate
        stash: list[dict[str, Any]] = []
        for i in range(3):
            p = submit(kube, f"r{i}", f"rival-{i}", spec(NLP, 8, 3, "rival"), ns=RIVAL)
            p["spec"]["schedulingGates"] = [HOLD]
            stash.append(kube.server.put(pod_path(RIVAL, f"rival-{i}"), p))
        await until("the stash seen", lambda: all(f"r{i}" in known(r) for i in range(3)))

        # an hour later nlp's own 3 x 8-GPU gang arrives and waits for quota: the VC's oldest waiter
        clock.t += 3600.0
        big = [submit(kube, f"g{i}", f"big-{i}", spec(NLP, 8, 3, "nlp/big")) for i in range(3)]
        assert "[InsufficientQuota]" in await reasons(r, big[0])
        assert r.s.waiting["nlp/big"].holds

        # another hour later (kube-scheduler asking about nlp/big all along) the rival lifts its own
        # gate: only now does its gang ask for anything
        for _ in range(12):
            clock.t += 300.0
            assert "[InsufficientQuota]" in await reasons(r, big[0])
        for i in range(3):
            p = kube.server.at(pod_path(RIVAL, f"rival-{i}"))
            p["spec"]["schedulingGates"] = []
            kube.server.put(pod_path(RIVAL, f"rival-{i}"), p)
        await until(
            "ungated seen",
            lambda: all(not known(r)[f"r{i}"]["spec"].get("schedulingGates") for i in range(3)),
        )
        rival = await reasons(r, kube.server.at(pod_path(RIVAL, "rival-0")))
        why = await reasons(r, big[1])
        assert "[Queued]" not in why, (
            "nlp's gang, waiting for an hour, is now queued behind a gang that entered the queue "
            f"just now: {why[:300]}"
        )
        assert "[Queued]" in rival, rival
        await r.stop()

    run(go())
