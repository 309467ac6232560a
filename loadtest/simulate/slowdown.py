"""How much longer a job runs when its GPUs are spread: the simulator's locality model.

A trace gives each job's run time, measured wherever the job happened to run. The model reads that
run time as the job's time on the *closest placement its size allows* and stretches it when a
scheduler spreads the job further. Spread is the lowest level that holds all of a job's GPUs:

| level | holds all the job's GPUs | closest for |
|---|---|---|
| `half` | one NVLink/PCIe half of a node (GPUs 0-3 or 4-7) | jobs of <= 4 GPUs |
| `node` | one node | jobs of 5-8 GPUs |
| `rack` | nodes of one rack, as few as the size needs | gangs of > 8 GPUs that fit a rack |
| `racks` | more than one rack, or more nodes than needed | gangs larger than a rack |

A job's run time is multiplied by `factor[level] / factor[closest level]`, so a job placed as close
as its size allows runs exactly as the trace says, whatever the factors. A one-GPU job is never
stretched. A gang on more nodes than it needs counts as `racks`: its traffic crosses more links than
any minimal placement's.

Default factors (`PUBLISHED`), each a cautious reading of published measurements:
- Zhao et al., "HiveD: Sharing a GPU Cluster for Deep Learning with Guarantees", OSDI '20: in the
  paper's motivation, a 2-GPU job across PCIe switches ran about 40% slower and one across machines
  about 5x slower (an affinity-sensitive model).
- Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning", OSDI '18: intra-server
  locality (GPUs under one PCIe switch) and inter-server locality change a job's speed by a large,
  model-dependent amount; Gandiva migrates jobs to improve it.
- Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI '19: models with
  large, skewed tensors (VGG, AlexNet) slow down markedly when spread across servers, others
  (ResNet, Inception) hardly at all; so consolidation should not be forced for every job.
- Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads"
  (the Philly study), USENIX ATC '19: jobs spread over more servers see lower GPU utilisation, and
  relaxing locality trades shorter queues for slower runs.

The defaults sit between the insensitive models (about 1x) and HiveD's sensitive one (1.4x across
switches, 5x across machines), as a mix of models would: 1.2x for a node instead of a half, 1.5x for
a rack instead of a node, 2x for several racks. `--locality-model none` turns the model off (every
factor 1, the trace's run times as they are), and `--slowdown half=1,node=1.2,...` sets any factor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from loadtest.simulate.cluster import SimCluster

LEVELS = ("half", "node", "rack", "racks")
PUBLISHED: dict[str, float] = {"half": 1.0, "node": 1.2, "rack": 1.5, "racks": 2.0}
NONE: dict[str, float] = dict.fromkeys(LEVELS, 1.0)
MODELS: dict[str, dict[str, float]] = {"published": PUBLISHED, "none": NONE}


class SlowdownError(ValueError):
    """A slowdown specification that cannot be used (names the level and what is wrong)."""


@dataclass(frozen=True, slots=True)
class Slowdown:
    """Run-time factors per spread level (see the module docstring)."""

    name: str
    factors: Mapping[str, float]

    @property
    def off(self) -> bool:
        return all(self.factors[lvl] == 1.0 for lvl in LEVELS)

    def stretch(self, cluster: SimCluster, gpus: int, spread: str) -> float:
        """The factor for a job of `gpus` GPUs whose placement spreads to level `spread`."""
        if gpus <= 1:
            return 1.0
        return self.factors[spread] / self.factors[closest_level(cluster, gpus)]


def closest_level(cluster: SimCluster, gpus: int) -> str:
    """The lowest level a job of `gpus` GPUs can sit in on `cluster`."""
    if gpus <= cluster.gpus_per_node // 2:
        return "half"
    if gpus <= cluster.gpus_per_node:
        return "node"
    if gpus <= cluster.gpus_per_node * cluster.rack_size:
        return "rack"
    return "racks"


def spread_level(cluster: SimCluster, pods: tuple[tuple[int, tuple[int, ...]], ...], gpus: int) -> str:
    """The lowest level holding every GPU of a placement ((node, GPU indices) per pod)."""
    nodes = {n for n, _ in pods}
    if len(nodes) == 1:
        halves = {cluster.half_of(g) for _, gs in pods for g in gs}
        return "half" if len(halves) == 1 else "node"
    minimal = len(nodes) == -(-gpus // cluster.gpus_per_node)
    if minimal and len({cluster.rack_of(n) for n in nodes}) == 1:
        return "rack"
    return "racks"


def make_slowdown(model: str, overrides: str | None = None) -> Slowdown:
    """`model` ("published" or "none") with `overrides` ("level=factor,...") applied."""
    if model not in MODELS:
        raise SlowdownError(f"unknown locality model {model!r} (choose from {', '.join(MODELS)})")
    factors = dict(MODELS[model])
    name = model
    if overrides:
        for item in overrides.split(","):
            level, sep, value = item.partition("=")
            level = level.strip()
            if not sep or level not in LEVELS:
                raise SlowdownError(
                    f"--slowdown: {item!r} is not LEVEL=FACTOR with LEVEL in {', '.join(LEVELS)}"
                )
            try:
                factors[level] = float(value)
            except ValueError:
                raise SlowdownError(f"--slowdown: factor of {level!r} is not a number: {value!r}") from None
        name = f"{model}+custom"
    previous = 0.0
    for level in LEVELS:
        f = factors[level]
        if not f >= 1.0 or f < previous:
            raise SlowdownError(
                f"--slowdown: factor of {level!r} is {f}: factors must be >= 1 and never fall with spread"
            )
        previous = f
    return Slowdown(name, factors)
