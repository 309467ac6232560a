"""How often 2- and 4-GPU pods get directly linked GPUs on the DGX-1 example, without and with links.

    python -m loadtest.dgx1_links [--config config/examples/dgx1-v100.yaml] [--fill 0.8]
        [--decisions 20000] [--seeds 1,2,3]

Replays the Philly week's job sizes (`loadtest.jobmix`, the simulator's mix; 10% opportunistic,
5% high priority through preemption, as `loadtest.bench_core`) on the config twice: once with its
`nvlinks` removed (the cell tree alone decides) and once as written (the graph breaks the tree's
ties). A pod counts as directly linked when its GPUs reach each other over direct links among
themselves (a pair: linked; four: a connected link graph), judged on the config's links both times.
Prints, per pod size, the pods placed and the share that got directly linked GPUs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from config.load import load_config
from loadtest.bench_core import Held, Job, core_callbacks, make_jobs, replay
from topology import graph as topograph
from topology.core import Core
from topology.model import Topology
from topology.spec import ClusterSpec

SIZES = (2, 4)


def without_links(spec: ClusterSpec) -> ClusterSpec:
    return replace(spec, cell_types=tuple(replace(t, links=()) for t in spec.cell_types))


def linked_share(
    spec: ClusterSpec, judge: Topology, fill: float, decisions: int, seed: int
) -> dict[int, list[int]]:
    """Per pod size: [pods placed, pods with directly linked GPUs]."""
    core = Core(spec)
    counts = {s: [0, 0] for s in SIZES}
    place, release, _ = core_callbacks(core)

    def count_place(job: Job) -> bool:
        ok = place(job)
        gang = core.gang(f"j{job.index}") if ok else None
        if gang is not None:
            for slot in gang.slots:
                n = len(slot.leaves)
                if n in counts:
                    counts[n][0] += 1
                    counts[n][1] += topograph.link_connected(judge.graph, slot.leaves)
        return ok

    jobs = make_jobs(core.vc_names(), decisions, seed)
    replay(jobs, core.gpu_count, fill, count_place, release, Held())
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.dgx1_links", description=__doc__)
    ap.add_argument("--config", default=str(Path(__file__).parent.parent / "config/examples/dgx1-v100.yaml"))
    ap.add_argument("--fill", type=float, default=0.8)
    ap.add_argument("--decisions", type=int, default=20000)
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args(argv)
    spec = load_config(args.config).spec
    judge = Topology(spec)
    if not judge.has_links:
        print(f"{args.config} declares no nvlinks: nothing to compare")
        return 1
    shown = Path(args.config).resolve()
    root = Path(__file__).resolve().parent.parent
    label = shown.relative_to(root) if shown.is_relative_to(root) else shown
    print(f"{label}, fill {args.fill:.0%}, {args.decisions} decisions a seed, seeds {args.seeds}")
    print(f"{'pod GPUs':>8} {'tree alone: linked / placed':>30} {'with links: linked / placed':>30}")
    totals = {name: {s: [0, 0] for s in SIZES} for name in ("before", "after")}
    for seed in (int(x) for x in args.seeds.split(",")):
        for name, s in (("before", without_links(spec)), ("after", spec)):
            got = linked_share(s, judge, args.fill, args.decisions, seed)
            for size in SIZES:
                totals[name][size][0] += got[size][0]
                totals[name][size][1] += got[size][1]
    for size in SIZES:
        cols = []
        for name in ("before", "after"):
            placed, linked = totals[name][size]
            share = linked / placed if placed else 0.0
            cols.append(f"{linked:>7} / {placed:<7} ({share:6.1%})")
        print(f"{size:>8} {cols[0]:>30} {cols[1]:>30}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
