"""After a Soft timeout, the pods of the gang that timed out run alone (`<gang>/solo/<pod>`) for up
to an hour (`SOFTENED_FOR`); once its last pod is gone, the name is free again. A job re-created
under the same PodGroup name (the usual way a Job, a PyTorchJob or a Volcano job is re-run) is a
gang again, all or nothing, Hard or Soft; before, its pods were placed one by one for the rest of
the hour, and a partial gang held GPUs waiting for members that might not fit."""

from __future__ import annotations

from typing import Any

import pytest

from extender.conventions import edge
from extender.http import wire
from tests.conventions.manifests import pod
from tests.extender.helpers import Clock, nodes, run, scheduler

COSCHED = "scheduling.x-k8s.io/pod-group"
MIN = "topogang.io/min-member"
TIMEOUT = "topogang.io/gang-timeout-seconds"
STYLE = "topogang.io/gang-scheduling-style"


def member(name: str, style: str, run_id: str) -> dict[str, Any]:
    ann = {MIN: "2", TIMEOUT: "60", STYLE: style}
    return pod(name, "vision", gpus=8, labels={COSCHED: "train"}, annotations=ann, uid=f"{run_id}-{name}")


@pytest.mark.parametrize("style", ["Hard", "Soft"])
def test_a_job_recreated_under_a_softened_name_is_placed_all_or_nothing(style: str) -> None:
    """A Soft run times out and is deleted; the job re-created under the same PodGroup name, Hard or
    Soft (its own timeout not yet passed), is a gang of 2 again."""

    async def go() -> None:
        clock = Clock()
        conv = edge.Conventions(clock=clock)
        s = scheduler(clock=clock, conventions=conv)

        async def filter_(p: dict[str, Any]) -> dict[str, Any]:
            return await s.filter(wire.parse_extender_args({"Pod": p, "NodeNames": nodes()}))

        # the first run: Soft, one of its two members never comes; the timeout softens it
        old = member("train-0", "Soft", "old")
        assert (await filter_(old))["NodeNames"]
        clock.t += 61
        await conv.tick(s)
        assert "vision/train" in conv.softened
        await s.pod_gone(old["metadata"]["uid"])  # the user deletes the job

        clock.t += 10
        new = member("train-0", style, "new")
        assert (await filter_(new))["NodeNames"]
        pr = s.cached(new["metadata"]["uid"])
        gang = pr.gang if pr is not None else None
        assert gang == "vision/train", (
            f"the new job's first pod was placed as {gang!r}: a one-pod gang, not the all-or-nothing "
            "gang of 2 its PodGroup asks for"
        )
        g = s.core.gang("vision/train")
        assert g is not None and len(g.slots) == 2

    run(go())


def test_the_rest_of_a_softened_job_still_runs_alone_while_any_of_its_pods_is_left() -> None:
    """What Soft promises stays: the members left after the timeout run as ordinary pods."""

    async def go() -> None:
        clock = Clock()
        conv = edge.Conventions(clock=clock)
        s = scheduler(clock=clock, conventions=conv)

        async def filter_(p: dict[str, Any]) -> dict[str, Any]:
            return await s.filter(wire.parse_extender_args({"Pod": p, "NodeNames": nodes()}))

        a, b = member("train-0", "Soft", "old"), member("train-1", "Soft", "old")
        assert (await filter_(a))["NodeNames"]
        assert (await filter_(b))["NodeNames"]
        clock.t += 61
        await conv.tick(s)
        await s.pod_gone(a["metadata"]["uid"])  # one member gone, the other still pending
        assert "vision/train" in conv.softened
        assert (await filter_(b))["NodeNames"]
        pr = s.cached(b["metadata"]["uid"])
        assert pr is not None and pr.gang == "vision/train/solo/train-1"

    run(go())
