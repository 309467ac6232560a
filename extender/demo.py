"""`topogang demo`: a scripted job mix through the core, every decision printed.

A newcomer's first look at what the scheduler does, runnable without Kubernetes: the same core the
extender serves, driven directly. On the bundled example cluster it plays a fixed script; on any
other config it derives the jobs from that config's VCs and their quotas (`derive_script`), so
`topogang demo my-cluster.yaml` shows one's own cluster.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from config.load import ConfigError, LoadedConfig, load_config
from config.quota import chain_types
from topology.core import Core
from topology.decisions import Bind, GangRequest, Member, UserError, Wait
from topology.inspect import cluster_leaves

EXAMPLE = Path(__file__).resolve().parent.parent / "config" / "examples" / "example-cluster.yaml"

# (gang name, VC, priority, [(pods, GPUs per pod)]) in arrival order
Job = tuple[str, str, int, list[tuple[int, int]]]
SCRIPT: list[Job] = [
    ("nlp/bert-1gpu-a", "nlp", 0, [(1, 1)]),
    ("nlp/bert-1gpu-b", "nlp", 0, [(1, 1)]),
    ("nlp/gpt-8gpu", "nlp", 0, [(1, 8)]),
    ("vision/resnet-32gpu", "vision", 100, [(4, 8)]),
    ("research/probe-2gpu", "research", 0, [(1, 2)]),
    ("research/sweep-6gpu", "research", 0, [(1, 6)]),
    ("research/scavenger", "research", -1, [(2, 4)]),
    ("research/too-big-24gpu", "research", 0, [(3, 8)]),
]


MAX_VCS = 6  # a derived script shows this many VCs at most: enough to see sharing, short enough to read


def derive_script(loaded: LoadedConfig) -> tuple[list[Job], dict[str, str]]:
    """Jobs for each VC of `loaded` (the first `MAX_VCS`), sized from its quota, and each VC's leaf type.

    Per VC, on the chain of its first quota entry: a 1-GPU job, a one-node job, a multi-node job
    within the quota, an opportunistic (priority -1) job, and a job one node over the quota, which
    must wait. A VC with no quota gets only the opportunistic job."""
    analysis = loaded.analysis
    if analysis is None:
        return [], {}
    first_chain = analysis.chains[0] if analysis.chains else None
    jobs: list[Job] = []
    leaf: dict[str, str] = {}
    for vc in [v.name for v in loaded.spec.virtual_clusters][:MAX_VCS]:
        own = [d for d in analysis.demands if d.vc == vc and d.chain in analysis.types]
        chain = own[0].chain if own else first_chain
        if chain is None:
            continue
        path = chain_types(chain, analysis.types)
        node = next((t for t in path if t.is_node_level), path[-1])
        leaf[vc] = node.leaf_type
        per_node = node.leaf_count
        quota = sum(
            d.number * analysis.types[d.cell_type].leaf_count
            for d in own
            if d.cell_type in analysis.types and analysis.types[d.cell_type].leaf_type == node.leaf_type
        )
        if quota >= 1:
            jobs.append((f"{vc}/one-gpu", vc, 0, [(1, 1)]))
        if quota >= per_node:
            jobs.append((f"{vc}/one-node-{per_node}gpu", vc, 0, [(1, per_node)]))
        nodes = min(quota // per_node, 4)
        if nodes >= 2:
            jobs.append((f"{vc}/{nodes}-nodes", vc, 0, [(nodes, per_node)]))
        jobs.append((f"{vc}/scavenger", vc, -1, [(1, min(per_node, 2))]))
        if quota >= 1:
            jobs.append((f"{vc}/over-quota", vc, 0, [(quota // per_node + 1, per_node)]))
    return jobs, leaf


def script_for(loaded: LoadedConfig) -> tuple[list[Job], dict[str, str]]:
    """The bundled script when the config has its VCs, else one derived from the config."""
    vcs = {v.name for v in loaded.spec.virtual_clusters}
    if {vc for _, vc, _, _ in SCRIPT} <= vcs:
        return SCRIPT, {}
    return derive_script(loaded)


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
    script, leaf = script_for(loaded)
    if not script:
        print("no virtual cluster to run jobs in")
        return 1
    for name, vc, prio, members in script:
        req = GangRequest(
            name, vc, tuple(Member(p, g) for p, g in members), priority=prio, leaf_type=leaf.get(vc)
        )
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
