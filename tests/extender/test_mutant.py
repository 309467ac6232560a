"""scripts/e2e/mutant.py, the deliberately broken extender for the e2e mutation check: each breakage
must really break the guarantee it names (or the check would pass against a no-op), and undo must
restore the real behaviour (these patches are process-wide)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.extender.helpers import args, bind_args, nodes, pod, run, scheduler, spec

MUTANT = Path(__file__).resolve().parents[2] / "scripts" / "e2e" / "mutant.py"


def load() -> ModuleType:
    loaded = importlib.util.spec_from_file_location("topogang_e2e_mutant", MUTANT)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def nlp_gang(prefix: str, pods: int) -> list[dict[str, object]]:
    """A gang of 8-GPU pods in VC nlp (3 nodes of the example cluster)."""
    text = spec("nlp", 8, pods, f"nlp/{prefix}")
    return [pod(f"{prefix}{i}", f"{prefix}-{i}", "nlp", text) for i in range(pods)]


async def filter_and_bind_all(mutant: str | None) -> dict[str, str | None]:
    """nlp holds gang a (2 nodes); then both members of gang b (2 nodes) go through filter and,
    where a node passes, bind. Which node each member of b got."""
    m = load()
    undo = m.apply(mutant) if mutant is not None else None
    try:
        s = scheduler()
        for p in nlp_gang("a", 2):
            r = await s.filter(args(p))
            assert r["NodeNames"], r
            assert await s.bind(bind_args(p, r["NodeNames"][0])) == {"Error": ""}
        got: dict[str, str | None] = {}
        for p in nlp_gang("b", 2):
            r = await s.filter(args(p))
            node = (r["NodeNames"] or [None])[0]
            if node is not None:
                assert await s.bind(bind_args(p, node)) == {"Error": ""}
            got[str(p["metadata"]["name"])] = node  # type: ignore[index]
        return got
    finally:
        if undo is not None:
            undo()


def test_the_partial_gang_mutant_binds_members_of_a_gang_that_does_not_fit_whole() -> None:
    broken = run(filter_and_bind_all("partial-gang"))
    assert sum(n is not None for n in broken.values()) == 1, broken  # the one free nlp node
    assert set(broken.values()) - {None} <= set(nodes())
    mended = run(filter_and_bind_all(None))
    assert mended == {"b-0": None, "b-1": None}


def test_the_node_health_mutant_keeps_a_not_ready_node_in_use() -> None:
    m = load()
    node = nodes()[0]
    undo = m.apply("ignore-node-health")
    try:
        s = scheduler()
        s.core.set_node_health(node, False)
        assert s.core.node_health(node) == ()
    finally:
        undo()
    s = scheduler()
    s.core.set_node_health(node, False)
    assert len(s.core.node_health(node)) == 8


def test_an_unknown_mutant_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown TOPOGANG_MUTANT"):
        load().apply("no-such-thing")
