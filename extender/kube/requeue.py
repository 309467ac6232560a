"""Requeue in kube-scheduler the pods the filter turned away, once room may have freed.

`extender.http.turned_away` says which pods are due; this writes, for each, a merge patch of the pod's
own annotation `topogang.io/requeued-at` (a new value each time: an unchanged one would be no update
at all). kube-scheduler (v1.37, `SchedulingQueue.Update`) moves an unschedulable pod that is updated
to its backoff or active queue whenever a plugin that rejected it answers Queue for the update; an
extender's rejection is recorded as the rejector `Extender`, which answers Queue for every event. So
the pod is filtered again after its backoff, now against the room the extender's watch has seen
free. Without the mark it would wait for some other cluster event, or the queue's 5-minute flush.

Who may cause a mark: only the extender's own watch (a release, a pod gone, a node healed), and
only on a pod that kube-scheduler's verbs door sent to the filter, as the API server names it (the
verbs trust the API server's copy, `extender.http.trusted`), and that the filter turned away for
lack of room, in that pod's own namespace; or, when the lead begins, a pod of topogang's scheduler
profile the API server lists as pending, whose gang the start notes in its VC's order
(`extender.kube.pending`). Nobody can name a pod to be marked. The patch carries the
pod's UID as a precondition, so a re-created pod of the same name is never touched, and writes only
that one annotation (RBAC: `patch` on pods, which the chart's ClusterRole has for promotions too).
At most `rate` patches a second (a burst of as many), so a release that frees room for thousands of
waiting pods does not flood the API server; a pod filtered again before its turn is dropped from
the queue (it has seen the room).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from extender.http.turned_away import Requeue, TurnedAway
from extender.kube.client import AsyncKube, patch_pod
from extender.ops.metrics import Metrics

log = logging.getLogger("topogang.kube")

ANNOTATION = "topogang.io/requeued-at"
RATE = 20.0  # patches a second, at most, in bursts of as many


def requeue_patch(pod: TurnedAway, mark: str) -> dict[str, object]:
    """The merge patch: the mark, with the UID as a precondition."""
    return {"metadata": {"uid": pod.uid, "annotations": {ANNOTATION: mark}}}


class Requeuer:
    """Marks the due pods of a `Requeue`, within a rate."""

    def __init__(
        self,
        requeue: Requeue,
        kube: AsyncKube,
        metrics: Metrics,
        *,
        rate: float = RATE,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.requeue = requeue
        self.kube = kube
        self.metrics = metrics
        self.rate = rate
        self.wall = wall
        self._last = 0  # the last mark written: every one differs from the one before

    def mark(self) -> str:
        """A value no earlier mark of this process had (microseconds of wall time, kept rising)."""
        now = int(self.wall() * 1_000_000)
        self._last = max(now, self._last + 1)
        return str(self._last)

    async def patch(self, pod: TurnedAway) -> str:
        """Mark one pod; the outcome (`patched`, `gone`: deleted or re-created, `failed`)."""
        got = await patch_pod(self.kube, pod.namespace, pod.name, requeue_patch(pod, self.mark()), "requeue")
        return "patched" if got == "done" else got

    async def run(self) -> None:
        """Mark due pods as they come, `rate` a second at most (`rate` at once after a pause). A
        failure is the one pod's (logged, counted): the task goes on for the others."""
        burst = max(1, int(self.rate))
        while True:
            await self.requeue.wake.wait()
            batch = self.requeue.take(burst)
            for pod in batch:
                try:
                    outcome = await self.patch(pod)
                except (OSError, TimeoutError) as exc:  # the API server unreachable for now
                    log.warning("cannot requeue pod %s/%s: %s", pod.namespace, pod.name, exc)
                    outcome = "failed"
                except Exception:
                    log.exception("cannot requeue pod %s/%s", pod.namespace, pod.name)
                    outcome = "failed"
                self.metrics.requeues.labels(outcome).inc()
            await asyncio.sleep(len(batch) / self.rate)
