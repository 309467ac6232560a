"""The bind info written in cached parts is byte for byte one `yaml.dump` of the whole document."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from extender.gangs.bindinfo import encode_bind_info
from topology.decisions import GangPlacement, PodPlacement

LONG = "team-" + "x" * 70 + " with spaces and: colons " + "y" * 40


def whole(p: GangPlacement, node: str, gpus: tuple[int, ...], slot: int | None, key: str | None) -> str:
    """The document as one dump (what HiveD's yaml.v2 shape looks like written in one go)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for pod in p.pods:
        entry: dict[str, Any] = {
            "physicalNode": pod.node,
            "physicalLeafCellIndices": list(pod.gpu_indices),
            "preassignedCellTypes": list(pod.cell_types) or [""] * len(pod.gpu_indices),
            "slot": pod.slot,
        }
        if pod.key is not None:
            entry["slotKey"] = pod.key
        groups.setdefault(len(pod.gpu_indices), []).append(entry)
    doc: dict[str, Any] = {
        "node": node,
        "leafCellIsolation": list(gpus),
        "cellChain": p.chain,
        "affinityGroupBindInfo": [{"podPlacements": e} for e in groups.values()],
        "gang": p.gang,
        "virtualCluster": p.vc,
        "priority": p.requested_priority,
    }
    if slot is not None:
        doc["slot"] = slot
    if key is not None:
        doc["slotKey"] = key
    return str(yaml.dump(doc, Dumper=yaml.SafeDumper, default_flow_style=False, sort_keys=False))


@pytest.mark.parametrize(
    ("gang", "vc", "priority", "slot", "key"),
    [
        ("ml/llm/0_a", "vision", 100, 1, "worker/1"),
        ("ml/llm/0_a", "vision", 100, None, None),
        ("ns/yes", "on", -1, 0, "true"),
        ("ns/" + LONG, LONG, 1000, 2, LONG),
        ("ns/a: b", "vc #1", 0, 3, "'quoted'"),
    ],
)
def test_parts_concatenate_to_one_dump(
    gang: str, vc: str, priority: int, slot: int | None, key: str | None
) -> None:
    p = GangPlacement(
        gang=gang,
        vc=vc,
        chain="A100-RACK",
        priority=priority,
        requested_priority=priority,
        pods=(
            PodPlacement(0, "a100-r1-n1", (0, 1, 2, 3, 4, 5, 6, 7), key, ("A100-NODE",) * 8),
            PodPlacement(1, "a100-r1-n2", (4, 5), None),
        ),
        lca_level=5,
        nodes=("a100-r1-n1", "a100-r1-n2"),
    )
    for _ in range(2):  # the second time from the caches
        assert encode_bind_info(p, "a100-r1-n1", (0, 1, 2, 3, 4, 5, 6, 7), slot, key) == whole(
            p, "a100-r1-n1", (0, 1, 2, 3, 4, 5, 6, 7), slot, key
        )
