"""Entitlement in the Kubernetes mode, against the in-memory API server: a refused pod gets a
Warning Event naming what it asked for and the key that would allow it; a PriorityClass's priority,
as admission resolved it into the pod, becomes the gang's."""

from __future__ import annotations

from typing import Any

from extender.kube.client import pod_path
from extender.kube.service import NOT_ENTITLED, kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, pod, run, spec
from tests.extender.test_entitlement import STRICT, config
from tests.extender.test_kube_durable import NS, Running, cluster, until


def submit(kube: FakeKube, p: dict[str, Any]) -> dict[str, Any]:
    m = p["metadata"]
    return kube.server.put(pod_path(m["namespace"], m["name"]), p)


def test_a_refused_pod_gets_a_warning_event_and_a_class_priority_is_the_gangs() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        r = Running(kube_service(config(STRICT), kube, clock=clock, namespace=NS))
        await until("ready", lambda: r.s.ready)
        team = pod("t0", "train-0", "research", spec("research", 4))
        team["spec"].update(priorityClassName="research-high", priority=80)
        await r.place(submit(kube, team))
        g = r.s.core.gang_of_pod("t0")
        assert g is not None and g.request.priority == 80

        bad = pod("x0", "take-0", "intruder", spec("vision", 8, 2, "take/vision", priority=1000))
        answer = await r.verb("filter", submit(kube, bad))
        assert "topogang.tenants.intruder" in answer["Error"]
        await until("event", lambda: any(e["reason"] == NOT_ENTITLED for e in kube.server.events))
        e = next(e for e in kube.server.events if e["reason"] == NOT_ENTITLED)
        assert (e["type"], e["involvedObject"]["name"], e["involvedObject"]["namespace"]) == (
            "Warning",
            "take-0",
            "intruder",
        )
        for words in ("intruder", "'vision'", "1000", "topogang.tenants.intruder"):
            assert words in e["message"], e["message"]
        assert r.s.core.gang_of_pod("x0") is None and len(r.s.core.gangs()) == 1
        await r.stop()

    run(go())
