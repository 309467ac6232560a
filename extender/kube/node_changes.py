"""Nodes a hot reload adds to the config or takes out: an added node is kept out of every placement
until the cluster has been read for it.

The sync knows the cluster only for the nodes of the config in force: pods on other nodes (topogang's
pods left running on a rack the admin took out for repair, pods of other schedulers holding GPUs)
are not held, and a node's Ready and GPU count are kept only for config nodes. A reload that
describes such a node builds a core in which all its GPUs are free and healthy, so the next filter
could give a GPU that a running pod holds. Instead, the reload's core has each added node fenced
(unhealthy, as every node is at the start until the API shows it Ready), and the sync then lists
the pods and adopts what runs there (`ClusterSync.on_pod`: topogang's pods as recovery adopts
them, others' GPUs held out), and only then reads the nodes and lets them in. A node the reload
removes takes its health record with it, so a later event of one of its outside pods cannot touch a
node the core no longer has.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from extender.kube import pods as kpods
from extender.kube.client import ApiError
from extender.kube.nodes import node_name
from topology.core import Core

if TYPE_CHECKING:
    from extender.kube.sync import ClusterSync

log = logging.getLogger("topogang.kube")
NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"


class NodeChanges:
    """Fences the nodes a reload adds and lets them in once read; one per sync."""

    def __init__(self, sync: ClusterSync, hooks: list[Callable[[Core], None]] | None = None) -> None:
        self.sync = sync
        self.tasks: set[asyncio.Task[None]] = set()
        self.hooks = hooks if hooks is not None else []  # the new core, under the lock (DRA mode)

    def reconfigured(self, old: Core, new: Core) -> None:
        """Called under the scheduler's lock, right after `new` replaced `old`."""
        sync = self.sync
        before, after = set(old.node_names()), set(new.node_names())
        for gone in before - after:
            sync.health.pop(gone, None)
        added = frozenset(after - before)
        sync.off_config.nodes_changed(before - after, added)  # pods there run outside it, or in it again
        for hook in self.hooks:
            hook(new)
        if not added:
            return
        for node in added:  # (a node the config lacked has no health record: `apply_nodes` skips it)
            new.set_node_health(node, False)
        sync.fenced |= added
        task = asyncio.get_running_loop().create_task(self.take_in(added))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def take_in(self, added: frozenset[str]) -> None:
        """Adopt what runs on `added`, then read their health; retried until the API answers."""
        backoff = 1.0
        while True:
            try:
                await self._read(added)
                return
            except (ApiError, OSError, TimeoutError) as err:
                log.warning("reading the nodes the config added failed (%s); retrying in %.0fs", err, backoff)
            await asyncio.sleep(backoff)
            backoff = min(10.0, backoff * 2)

    async def _read(self, added: frozenset[str]) -> None:
        sync = self.sync
        pods, _ = await sync.kube.list(PODS)
        for pod in pods:
            if kpods.node_name(pod) in added:
                sync.foreign.discard(kpods.uid(pod))  # judged again, now that its node is the config's
                await sync.on_pod("MODIFIED", pod)
        nodes, _ = await sync.kube.list(NODES)
        sync.fenced -= added
        await sync.apply_nodes([n for n in nodes if node_name(n) in added], full=False)
        log.info("nodes added by the config, read and in use: %s", ", ".join(sorted(added)))
