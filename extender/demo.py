"""`topogang demo`: a scripted job mix through the core, every decision printed.

A newcomer's first look at what the scheduler does, runnable without Kubernetes: the same core the
extender serves, driven directly, on the bundled example cluster.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from config.load import ConfigError, load_config
from topology.core import Core
from topology.decisions import Bind, GangRequest, Member, UserError, Wait
from topology.inspect import cluster_leaves

EXAMPLE = Path(__file__).resolve().parent.parent / "config" / "examples" / "example-cluster.yaml"

# (gang name, VC, priority, [(pods, GPUs per pod)]) in arrival order
SCRIPT: list[tuple[str, str, int, list[tuple[int, int]]]] = [
    ("nlp/bert-1gpu-a", "nlp", 0, [(1, 1)]),
    ("nlp/bert-1gpu-b", "nlp", 0, [(1, 1)]),
    ("nlp/gpt-8gpu", "nlp", 0, [(1, 8)]),
    ("vision/resnet-32gpu", "vision", 100, [(4, 8)]),
    ("research/probe-2gpu", "research", 0, [(1, 2)]),
    ("research/sweep-6gpu", "research", 0, [(1, 6)]),
    ("research/scavenger", "research", -1, [(2, 4)]),
    ("research/too-big-24gpu", "research", 0, [(3, 8)]),
]


def describe(core: Core, d: Bind) -> str:
    p = d.placement
    cells = core.level_types(p.chain)
    within = cells[p.lca_level] if p.lca_level < len(cells) else "cluster"
    pods = "  ".join(f"{pp.node}:{','.join(map(str, pp.gpu_indices))}" for pp in p.pods)
    return f"placed within one {within:<12} {pods}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="topogang demo", description=__doc__)
    ap.add_argument(
        "config", nargs="?", default=str(EXAMPLE), help="cluster config (default: bundled example)"
    )
    args = ap.parse_args(argv)
    try:
        loaded = load_config(args.config)
    except ConfigError as err:
        print(err)
        return 1
    core = Core(loaded.spec)
    print(f"cluster {args.config}: {len(core.node_names())} nodes, {core.gpu_count} GPUs")
    print(f"{'gang':<26} {'vc':<9} {'prio':>4}  decision")
    now = 0.0
    for name, vc, prio, members in SCRIPT:
        req = GangRequest(name, vc, tuple(Member(p, g) for p, g in members), priority=prio)
        first: Bind | Wait | None = None
        try:
            for i, (pods, gpus) in enumerate(members):
                for k in range(pods):
                    d = core.schedule(req, f"{name}-{i}-{k}", gpus, now)
                    first = first or d
                    if isinstance(d, Wait):
                        break
        except UserError as err:
            print(f"{name:<26} {vc:<9} {prio:>4}  rejected: {err}")
            continue
        if isinstance(first, Bind):
            print(f"{name:<26} {vc:<9} {prio:>4}  {describe(core, first)}")
        elif isinstance(first, Wait):
            print(f"{name:<26} {vc:<9} {prio:>4}  waits [{first.reason.code.value}]: {first.reason.message}")
    released = [core.delete_gang(g.name) for g in core.gangs()]
    free = cluster_leaves(core)[1]
    print(f"released {len(released)} gangs; free GPUs back to {free}")
    return 0
