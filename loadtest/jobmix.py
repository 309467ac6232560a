"""Job sizes as the Microsoft Philly trace has them (Jeon et al., USENIX ATC '19).

Counts per GPU size from the week of 2017-10-23 (`loadtest/simulate/data/`); jobs of more than 8 GPUs
become gangs of ⌈g/8⌉ pods × 8 GPUs, as they would run on 8-GPU servers.
"""

from __future__ import annotations

import random

PHILLY_WEEK_SIZES: dict[int, int] = {1: 7093, 2: 167, 4: 316, 8: 138, 12: 7, 16: 19, 24: 4, 32: 4}


def pods_for(gpus: int, per_node: int = 8) -> list[int]:
    """Pod sizes for a job of `gpus` GPUs."""
    if gpus <= per_node:
        return [gpus]
    return [per_node] * -(-gpus // per_node)


def sampler(seed: int) -> random.Random:
    return random.Random(seed)


def draw_sizes(rng: random.Random, n: int) -> list[int]:
    """`n` job sizes (GPUs) drawn with Philly's frequencies; deterministic for a seed."""
    sizes = sorted(PHILLY_WEEK_SIZES)
    weights = [PHILLY_WEEK_SIZES[s] for s in sizes]
    return rng.choices(sizes, weights=weights, k=n)
