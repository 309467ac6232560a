"""The structure the code keeps, read from the sources with `ast` (nothing is imported or run):

- no import cycle anywhere in the product (a cycle means two modules are one concept, or the
  boundary between them is in the wrong place);
- the core's facade stays a facade, and no product module outgrows one concept;
- nothing outside `topology/` reaches into the core's state, topology or reservations: the edge asks
  the core's read-only queries, so the core can change its insides without breaking the edge.

Each rule was broken when it was written (an import loop between the core and preemption, and
between the verbs and the conventions; a 1,158-line core; 64 reads of the core's insides from the
edge), so none of them can pass vacuously.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("topology", "config", "extender", "loadtest")
FACADE = ROOT / "topology" / "core.py"
FACADE_LINES = 300
MODULE_LINES = 500
# what the core keeps inside (`topology.cluster.Cluster`): the edge asks the core's queries instead
CORE_INTERNALS = frozenset(
    {
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
)
EDGE = ("config", "extender", "loadtest", "scripts")


def product_files() -> Iterator[Path]:
    for package in PRODUCT:
        yield from sorted((ROOT / package).rglob("*.py"))
    yield ROOT / "topogang_cli.py"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """Product modules `path` imports (at any depth of the file: a lazy import is still a tie)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != me:
                out.add(name)
    return out


def import_graph() -> nx.DiGraph:
    files = list(product_files())
    known = {module_name(p) for p in files}
    graph = nx.DiGraph()
    for path in files:
        me = module_name(path)
        graph.add_node(me)
        for other in imports(path, known):
            # a package's __init__ re-exporting its own modules is not a cycle of concepts
            if not other.startswith(me + ".") and not me.startswith(other + "."):
                graph.add_edge(me, other)
    return graph


def test_no_import_cycle_in_the_product() -> None:
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join([*c, c[0]]) for c in cycles)


def test_the_core_is_a_facade_and_no_module_outgrows_one_concept() -> None:
    facade = len(FACADE.read_text(encoding="utf-8").splitlines())
    assert facade <= FACADE_LINES, f"topology/core.py has {facade} lines; the facade keeps {FACADE_LINES}"
    big = {
        str(p.relative_to(ROOT)): n
        for p in product_files()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert big == {}, f"modules over {MODULE_LINES} lines: {big}"


def core_internal_reads(path: Path) -> list[str]:
    """`<something>.core.topo`, `core.state`, … : the edge reading what the core keeps inside."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute) or node.attr not in CORE_INTERNALS:
            continue
        owner = node.value
        named = (
            owner.id
            if isinstance(owner, ast.Name)
            else owner.attr
            if isinstance(owner, ast.Attribute)
            else ""
        )
        if named == "core":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: core.{node.attr}")
    return found


@pytest.mark.parametrize("package", EDGE)
def test_nothing_outside_topology_reads_the_cores_internals(package: str) -> None:
    reads = [r for p in sorted((ROOT / package).rglob("*.py")) for r in core_internal_reads(p)]
    assert reads == [], "\n".join(reads)


def folder_of(module: str) -> str:
    """The folder a module's concept lives in: `extender.<folder>` for the extender's packages (the
    top-level modules, `cli`, `standalone`, `kubesched`, … are the folder `extender` itself), else the
    product package."""
    parts = module.split(".")
    if parts[0] == "extender" and len(parts) >= 2 and (ROOT / "extender" / parts[1]).is_dir():
        return f"extender.{parts[1]}"
    return parts[0]


def test_no_two_folders_of_the_extender_import_each_other() -> None:
    """Folders form layers (ops < gangs < conventions < http < kube < the commands): two that import
    each other are one concept split in two, or a boundary in the wrong place."""
    ties: dict[tuple[str, str], list[str]] = {}
    for a, b in import_graph().edges:
        fa, fb = folder_of(a), folder_of(b)
        if fa != fb and fa.startswith("extender") and fb.startswith("extender"):
            ties.setdefault((fa, fb), []).append(f"{a} -> {b}")
    both = sorted((fa, fb) for fa, fb in ties if fa < fb and (fb, fa) in ties)
    assert both == [], "; ".join(f"{fa} <-> {fb}: {ties[fa, fb][:2]} / {ties[fb, fa][:2]}" for fa, fb in both)


def test_the_product_never_imports_the_tests() -> None:
    """What ships (and what CI-less users run: the benchmarks, the simulator) cannot need the test tree."""
    found = []
    for path in product_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            found += [
                f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}: {n}"
                for n in names
                if n.split(".")[0] == "tests"
            ]
    assert found == [], "\n".join(found)


def test_one_file_name_per_concept_in_the_extender() -> None:
    """Two modules of one name in the extender's folders are two concepts under one name (three files
    were once called `reservations.py`): name them by role. (`topology/` and `extender/` may share a name
    where the extender holds the edge's half of the core's concept: `recovery`, `snapshot`.)"""
    seen: dict[str, list[str]] = {}
    for path in product_files():
        if path.name != "__init__.py" and path.parts[len(ROOT.parts)] == "extender":
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    reservations = [str(p.relative_to(ROOT)) for p in product_files() if p.name == "reservations.py"]
    assert {n: p for n, p in seen.items() if len(p) > 1} == {}
    assert reservations == ["topology/reservations.py"]
