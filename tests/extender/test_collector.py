"""`extender.ops.collector.collector_paused`: no automatic collections inside, the collector as it
was afterwards (also when the block raises, and when it was off already)."""

from __future__ import annotations

import gc

import pytest

from extender.ops.collector import collector_paused


def test_the_collector_is_off_inside_and_back_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_comes_back_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("recovery failed")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_start_lists_and_recovers_with_the_collector_paused() -> None:
    """What `ClusterSync.start` runs while the pods are listed and recovered sees no collector."""
    import asyncio

    from extender.kube import sync

    seen: list[bool] = []

    class Probe(sync.ClusterSync):
        async def _recover(self):  # type: ignore[no-untyped-def]
            seen.append(gc.isenabled())
            raise RuntimeError("stop here")

    probe = object.__new__(Probe)

    class S:
        not_ready_reason = ""

    class K:
        async def list(self, path: str) -> tuple[list[object], str]:
            return [], "1"

    async def no_nodes(nodes: object, *, full: bool) -> None:
        return None

    probe.s, probe.kube, probe.apply_nodes = S(), K(), no_nodes  # type: ignore[assignment,method-assign]
    with pytest.raises(RuntimeError, match="stop here"):
        asyncio.run(probe.start())
    assert seen == [False] and gc.isenabled()


def test_the_hook_after_recovery_runs_once_with_the_collector_back_before_ready() -> None:
    """`kube_service(freeze_after_recovery=True)` (what `topogang serve` asks) freezes what the
    start built once recovery is done: the hook sees the collector resumed and the service not
    yet ready."""
    import asyncio

    from extender.kube.service import kube_service
    from extender.kube.sync import ClusterSync
    from tests.extender.helpers import example, nodes
    from tests.extender.test_kube_edge import apiserver, node

    async def go() -> None:
        kube = apiserver([], [node(n) for n in nodes()])
        service = kube_service(example(), kube, freeze_after_recovery=True)
        wired = service.pod_source.__self__  # type: ignore[union-attr]  # the service's own sync
        assert isinstance(wired, ClusterSync) and wired.after_recovery is gc.freeze
        assert kube_service(example(), kube).pod_source.__self__.after_recovery is None  # type: ignore[union-attr]
        sync = ClusterSync(service.scheduler, kube)
        seen: list[tuple[bool, bool]] = []
        sync.after_recovery = lambda: seen.append((gc.isenabled(), service.scheduler.ready))
        await sync.start()
        assert seen == [(True, False)] and service.scheduler.ready

    asyncio.run(go())
    assert gc.isenabled()
