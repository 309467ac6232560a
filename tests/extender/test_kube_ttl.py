"""The TTL cap across a restart, in Kubernetes mode against the in-memory API server: a gang with a
member bound and one missing keeps the deadline it had, from its `GangReservation` object, rather
than the fresh TTL its bound member's bind info alone would give it; so it expires on time."""

from __future__ import annotations

from extender.gangs import reservation_objects as rsv
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import COLLECTION, cluster, start, submit

NLP = "nlp"


def test_a_partly_bound_gang_keeps_its_deadline_across_a_restart() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        await a.place(submit(kube, "p0", "pair-0", NLP, spec(NLP, 8, 2, "nlp/pair")))
        g = a.s.core.gang("nlp/pair")
        assert g is not None and g.deadline is not None
        deadline, ttl = g.deadline, g.request.ttl_seconds
        clock.t += ttl * 0.6
        for fn in a.service.on_stop:  # the periodic sync: the object stays, the gang is not whole
            await fn()
        await a.stop()
        (obj,) = kube.server.list(COLLECTION)[0]
        assert obj["spec"]["gang"] == "nlp/pair" and obj["status"]["phase"] == "Reserved"
        assert rsv.needs_object(g)

        clock.t += 1
        b = await start(kube, clock)
        h = b.s.core.gang("nlp/pair")
        assert h is not None and h.slot_of("p0") is not None  # adopted from its bound member
        assert h.deadline is not None and abs(h.deadline - deadline) <= 1.0, (h.deadline, deadline)
        clock.t = deadline + 1.0
        released = await b.s.expire()
        assert [r.gang for r in released] == ["nlp/pair"]
        await b.stop()

    run(go())
