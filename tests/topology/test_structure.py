"""The core's house rules, read from the sources with `ast` (nothing is imported or run).

- `topology/` has no import cycle: each concept module imports only what lies below it, and
  `core.py` (the façade) sits above them all.
- `topology/core.py` stays a façade (at most 300 lines) and no `topology/` module outgrows 500 lines.
- Nothing outside `topology/` reads the core's internals (its topology, cell state, reservations,
  placer, owners or quota tables): the edge asks the core's queries instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "topology"
EDGE = [ROOT / "extender", ROOT / "loadtest", ROOT / "topogang_cli.py", ROOT / "config", ROOT / "scripts"]
INTERNALS = {
    "topo",
    "state",
    "reservations",
    "placer",
    "owners",
    "vc_owner",
    "pinned_owner",
    "preemptors",
    "vc_quota_leaves",
    "vc_quota_cells",
    "spec",
    "valid_shapes",
    "last_suggested",
}


def _sources(*roots: Path) -> list[Path]:
    out: list[Path] = []
    for root in roots:
        out.extend([root] if root.is_file() else sorted(root.rglob("*.py")))
    return out


def _topology_imports(path: Path) -> set[str]:
    """The `topology` modules a file imports (`from topology import x` names module x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "topology":
                found.update(f"topology.{a.name}" for a in node.names)
            elif node.module.startswith("topology."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("topology."))
    return found


def test_topology_has_no_import_cycle() -> None:
    graph = {f"topology.{p.stem}": _topology_imports(p) for p in _sources(TOPOLOGY)}
    done: set[str] = set()

    def visit(mod: str, path: list[str]) -> None:
        if mod in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(mod) :], mod]))
        if mod in done:
            return
        for dep in sorted(graph.get(mod, ())):
            visit(dep, [*path, mod])
        done.add(mod)

    for mod in sorted(graph):
        visit(mod, [])


def test_the_facade_is_thin_and_no_module_outgrows_its_room() -> None:
    lines = {p.name: len(p.read_text().splitlines()) for p in _sources(TOPOLOGY)}
    assert lines["core.py"] <= 300, lines["core.py"]
    assert {name: n for name, n in lines.items() if n > 500} == {}


def test_nothing_outside_topology_reads_the_cores_internals() -> None:
    reads = []
    for path in _sources(*EDGE):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Attribute) and node.attr in INTERNALS):
                continue
            owner = node.value
            name = (
                owner.id
                if isinstance(owner, ast.Name)
                else owner.attr
                if isinstance(owner, ast.Attribute)
                else ""
            )
            if name == "core":
                reads.append(f"{path.relative_to(ROOT)}:{node.lineno}: core.{node.attr}")
    assert reads == []
