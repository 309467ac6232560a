"""Hundreds of applied reloads on an in-process Scheduler, with verbs between them: nothing the
scheduler keeps per core grows with the number of reloads. The shared node lists once kept every
replaced core's answer for the node list kube-scheduler sends each time (~4.5 KB per reload with 40
nodes outside the config)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import orjson

from extender.http import wire
from tests.extender.helpers import Clock, nodes, pod, run, spec
from tests.extender.watched import EXAMPLE, watched
from topology.invariants import violations

RELOADS = 300
# kube-scheduler lists every node of the cluster, CPU nodes too: 12 GPU nodes + 40 others
NAMES = nodes() + [f"cpu-{i}" for i in range(40)]


def body(p: dict[str, Any]) -> bytes:
    return orjson.dumps({"Pod": p, "Nodes": None, "NodeNames": NAMES})


def test_hundreds_of_reloads_keep_nothing_per_old_core(tmp_path: Path) -> None:
    async def go() -> None:
        base = EXAMPLE
        s, watcher, path = watched(tmp_path)
        clock = s.clock
        assert isinstance(clock, Clock)

        async def filt(p: dict[str, Any]) -> dict[str, Any]:
            doc = wire.loads(body(p), s.node_lists)
            return await s.filter(wire.parse_extender_args(doc, s.node_lists))

        sizes = []
        for i in range(RELOADS):
            ttl = 300 if i % 2 else 301
            path.write_text(base.replace("reservationTtlSeconds: 300", f"reservationTtlSeconds: {ttl}"))
            assert await watcher.check() == "applied"
            p = pod(f"u{i}", f"p{i}", "vision", spec("vision", 8, 1, f"vision/g{i % 3}"))
            await filt(p)
            await s.pod_gone(f"u{i}")
            clock.t += 1
            if i in (9, RELOADS - 1):
                gc.collect()
                memo = sum(len(n.memo) for n in s.node_lists._node_lists.values())
                sizes.append(memo)
        assert violations(s.core) == []
        # one entry per reload is kept in the shared node list's memo, keyed by the id of a dead core
        assert sizes[-1] <= sizes[0] + 2, f"node-list memo entries after 10 / {RELOADS} reloads: {sizes}"

    run(go())
