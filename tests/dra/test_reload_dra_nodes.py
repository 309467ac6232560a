"""DRA mode and a hot reload. A reload that adds a node (`extender.kube.node_changes` fences and
then takes in the added node) leaves DRA mode knowing that node: its GPUs kept out while it
publishes no ResourceSlice (as every node's are at the start), and mapped to devices once it does.
Before, the DRA catalog kept the start's topology for good: the added node's GPUs were given out
although no claim could ever be allocated on them, and never mapped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from config.load import load_config_text
from extender.dra.devices import DeviceMap, DraSettings
from extender.kube import dra_mode
from extender.kube.dra import DraBinder
from extender.kube.events import EventRecorder
from extender.kube.node_changes import NodeChanges
from extender.kube.sync import ClusterSync
from extender.ops.metrics import Metrics
from loadtest.kubefake import FakeKube
from tests.dra.test_devices import gpu_slice
from tests.extender.watched import EXAMPLE, watched
from topology.core import Core

ADDED = "a100-r4-n1"
RACK4 = """  - cellType: A100-RACK           # rack 4, added by the reload
    cellChildren:
    - cellAddress: a100-r4-n1
    - cellAddress: a100-r4-n2
    - cellAddress: a100-r4-n3
    - cellAddress: a100-r4-n4
"""


def grown() -> str:
    marker = "\n# --- Virtual clusters"
    assert marker in EXAMPLE
    return EXAMPLE.replace(marker, "\n" + RACK4 + marker, 1)


def test_a_node_added_by_a_reload_is_known_to_dra_mode(tmp_path: Path) -> None:
    async def go() -> None:
        s, watcher, path = watched(tmp_path)
        kube = FakeKube()
        sync = ClusterSync(s, kube)
        metrics = Metrics()
        recorder = EventRecorder(kube, metrics, clock=lambda: 0.0, instance="t")
        loaded = load_config_text(EXAMPLE, str(path))
        # wired as `extender.kube.service` wires a Kubernetes-mode serve with --dra and its reloads
        # (the `reload_hooks` list: without it a reload reaches no DRA code)
        hooks: list[Callable[[Core], None]] = []
        try:
            dra_mode.attach(s, sync, kube, loaded, DraSettings(), recorder, metrics, hooks)
            changes = NodeChanges(sync, hooks)
        except TypeError:  # today's signatures: DRA mode takes no part in a reload
            dra_mode.attach(s, sync, kube, loaded, DraSettings(), recorder, metrics)
            changes = NodeChanges(sync)
        watcher.on_applied = changes.reconfigured
        assert isinstance(s.binder, DraBinder)
        catalog = s.binder.catalog
        path.write_text(grown(), encoding="utf-8")
        assert await watcher.check() == "applied"
        assert ADDED in s.core.node_names()
        # no ResourceSlice of the added node yet: none of its GPUs can be allocated, none given out
        assert sync.extra_bad(ADDED) == frozenset(range(8)), (
            f"GPUs kept out of node {ADDED} with no ResourceSlice: {sorted(sync.extra_bad(ADDED))}"
        )
        # its driver publishes its devices: they are mapped as any node's
        await catalog.relist_slices([gpu_slice(node=ADDED, name="r4n1")])
        assert isinstance(catalog.device_map(ADDED), DeviceMap), catalog.device_map(ADDED)

    asyncio.run(go())
