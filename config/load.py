"""Read an admin's YAML into a validated `ClusterSpec`, or fail with every problem at once.

Three layers, each reporting with config paths (`virtualClusters.team-a.virtualCells[1].cellNumber`):
YAML syntax (with line and column; duplicate keys are errors, because PyYAML would silently keep the
last one and a VC or cell type would vanish), the pydantic shape check (`config.schema`), and the
semantic checks (`config.validate`). An admin fixes a file in one round trip, not one error per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from config.check_tenants import check_tenants
from config.problems import errors_of, format_line, format_problem, warnings_of
from config.schema import HivedConfigModel, PhysicalCellModel, TopogangModel, unknown_keys
from config.untrusted import CONFIG_LIMITS, UntrustedError, check_yaml, yaml_error
from config.validate import Analysis, analyze
from config.yamlpos import locate
from topology.layout import Problem
from topology.spec import (
    CellTypeSpec,
    ClusterSpec,
    PhysicalCellSpec,
    VirtualCellSpec,
    VirtualClusterSpec,
)

_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _TextLoader(yaml.SafeLoader):
    """SafeLoader that resolves only null and `<<`: every other plain scalar stays the text written.

    Go's yaml hands a scalar's raw text to a string field, so HiveD reads `cellAddress: 007` as "007"
    and a node named `on` as "on"; YAML 1.1 resolution would make them 7 and True. Integer and boolean
    fields parse the text later (pydantic lax mode)."""


_TextLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag in (_NULL_TAG, _MERGE_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

# The same loader on libyaml's parser and composer (~10x faster on a 12,500-node config); a text it
# refuses is read again by the pure-Python one above, whose error messages are the ones users see.
_CTextLoader: type | None = (
    type(
        "_CTextLoader", (yaml.CSafeLoader,), {"yaml_implicit_resolvers": _TextLoader.yaml_implicit_resolvers}
    )
    if hasattr(yaml, "CSafeLoader")
    else None
)


class ConfigError(Exception):
    """A config that cannot be used. `str()` is one `FILE: path.to.field: reason` line per error."""

    def __init__(
        self, file: str, errors: Sequence[tuple[str, str]], warnings: Sequence[Problem] = ()
    ) -> None:
        self.file = file
        self.errors: list[tuple[str, str]] = list(errors)
        self.warnings: list[Problem] = list(warnings)
        super().__init__(str(self))

    def lines(self) -> list[str]:
        return [format_line(self.file, path, reason) for path, reason in self.errors]

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass(frozen=True)
class LoadedConfig:
    """A config that passed every check: the core's input plus what only the service needs."""

    file: str
    spec: ClusterSpec
    model: HivedConfigModel
    warnings: tuple[Problem, ...]
    analysis: Analysis | None = None  # what validation computed (None with check=False)

    @property
    def extras(self) -> TopogangModel:
        """The `topogang:` section (defaults when absent)."""
        return self.model.topogang

    def warning_lines(self) -> list[str]:
        return [format_problem(self.file, w) for w in self.warnings]


def load_config(path: str | Path, *, check: bool = True) -> LoadedConfig:
    """Load and validate a config file; raise `ConfigError` listing every problem found.

    `check=False` stops after the shape check (the spec may then be inconsistent); only tools that
    want to show a broken cluster use it."""
    file = str(path)
    p = Path(path)
    try:
        if p.is_dir():
            raise ConfigError(file, [("", "is a directory, not a config file")])
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(file, [("", "no such file")]) from None
    except OSError as exc:
        raise ConfigError(file, [("", f"cannot read: {exc.strerror or exc}")]) from None
    return load_config_bytes(data, file, check=check)


def load_config_bytes(data: bytes, file: str, *, check: bool = True) -> LoadedConfig:
    """`load_config` on the bytes already read from `file` (a reload parses the very bytes it
    hashed: an update landing between two reads would run one config and record another)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(file, [("", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    return load_config_text(text, file, check=check)


def load_config_text(text: str, filename: str = "<config>", *, check: bool = True) -> LoadedConfig:
    """`load_config` for text already in memory (tests, the reload endpoint, generated configs)."""
    raw, errors = parse_yaml(text)
    if raw is None and not errors:
        errors.append(("", "empty config: expected a mapping with physicalCluster and virtualClusters"))
    elif raw is not None and not isinstance(raw, dict):
        errors.append(("", f"the top level must be a mapping of keys, not {_kind(raw)}"))
    if not isinstance(raw, dict):
        raise ConfigError(filename, errors)
    if "physicalCluster" not in raw and ("kind" in raw or "metadata" in raw):
        kind = raw.get("kind") if isinstance(raw.get("kind"), str) else "object"
        errors.append(
            (
                "",
                f"this is a Kubernetes {kind} (it has kind/metadata), not a topogang config: a config has "
                "physicalCluster and virtualClusters (pods to copy are in examples/)",
            )
        )
        raise ConfigError(filename, errors)
    try:
        model = HivedConfigModel.model_validate(raw)
    except ValidationError as exc:
        errors.extend(pydantic_errors(exc, raw, compose(text)))
        raise ConfigError(filename, errors) from None
    spec = to_spec(model)
    analysis = analyze(spec) if check else None
    problems: list[Problem] = [*unknown_keys(model), *(analysis.problems if analysis else ())]
    if check:
        problems += check_tenants(spec, model.topogang)
    errors.extend((p.path, p.message) for p in errors_of(problems))
    warnings = tuple(warnings_of(problems))
    if errors:
        raise ConfigError(filename, errors, warnings)
    return LoadedConfig(filename, spec, model, warnings, analysis)


def parse_yaml(text: str) -> tuple[Any, list[tuple[str, str]]]:
    """The document (scalars as text) and its errors: syntax with line/column, and duplicate keys.
    Nesting and alias expansion are bounded first (`config.untrusted`): a config comes from a
    ConfigMap, and a document that nests thousands deep or expands its aliases a billion times must
    be an error, not a crash or a stall."""
    try:
        check_yaml(text, CONFIG_LIMITS, pure=True)
    except UntrustedError as exc:
        return None, [(exc.path, exc.message)]
    if _CTextLoader is not None:
        fast = _CTextLoader(text)
        try:
            node = fast.get_single_node()
            if node is None:
                return None, []
            errors = _duplicate_keys(node, "", set())  # before constructing: merge keys rewrite nodes
            return fast.construct_document(node), errors
        except yaml.YAMLError:
            pass  # read again below, for the pure-Python parser's wording
        finally:
            fast.dispose()
    loader = None
    try:
        loader = _TextLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None, []
        errors = _duplicate_keys(node, "", set())
        return loader.construct_document(node), errors
    except yaml.MarkedYAMLError as exc:
        return None, [yaml_error(exc)]
    except yaml.YAMLError as exc:
        return None, [("", f"YAML syntax error: {exc}")]
    finally:
        if loader is not None:
            loader.dispose()


def _duplicate_keys(node: yaml.Node, path: str, active: set[int]) -> list[tuple[str, str]]:
    """Keys given twice in one mapping. `active` guards against recursive aliases."""
    if id(node) in active:
        return []
    found: list[tuple[str, str]] = []
    active.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key, line = key_node.value, key_node.start_mark.line + 1
            sub = f"{path}.{key}" if path else key
            if key in first_line:
                found.append(
                    (
                        sub,
                        f"duplicate key {key!r} at line {line} (first at line {first_line[key]}); YAML "
                        "would silently keep only the last one",
                    )
                )
            else:
                first_line[key] = line
            found.extend(_duplicate_keys(value_node, sub, active))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found.extend(_duplicate_keys(item, f"{path}[{i}]", active))
    active.discard(id(node))
    return found


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the text {_short(value)}"
    return f"a {type(value).__name__}"


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_loc(loc: Sequence[int | str], raw: Any) -> str:
    """A pydantic location as a config path: list positions as `[i]`, mapping keys as `.key`.

    The raw document decides which is which, because an integer in `loc` may be either a list index
    or a mapping key that happens to be numeric."""
    out = ""
    cur: Any = raw
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(cur, list) and isinstance(part, int):
            out += f"[{part}]"
            cur = cur[part] if 0 <= part < len(cur) else None
        else:
            out += f".{part}" if out else str(part)
            cur = cur.get(part) if isinstance(cur, dict) else None
    return out


# pydantic names its model classes in these; an admin needs the YAML word instead
_FRIENDLY = {
    "model_type": "Input should be a mapping of keys",
    "model_attributes_type": "Input should be a mapping of keys",
    "dict_type": "Input should be a mapping of keys",
}


def compose(text: str) -> yaml.Node | None:
    """The YAML node tree (with line and column marks), for locating errors; None if unreadable.

    Only called once a config is known to be wrong and to parse, so its cost never reaches a
    valid load."""
    loader = (_CTextLoader or _TextLoader)(text)
    try:
        node: yaml.Node | None = loader.get_single_node()
        return node
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()


def pydantic_errors(exc: ValidationError, raw: Any, root: yaml.Node | None = None) -> list[tuple[str, str]]:
    """Each pydantic error as (config path, reason naming the offending value); with the YAML
    `root`, the reason also names the line and column, and the indentation slip that likely caused
    it (`config.yamlpos`)."""
    out: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        path = render_loc(loc, raw)
        if err["type"] == "missing":
            reason = "required key is missing"
        elif loc and loc[-1] == "[key]":
            reason = f"invalid name {_short(err['input'])}: {err['msg']}"
        else:
            msg = _FRIENDLY.get(err["type"], err["msg"])
            got = "nothing (an empty value)" if err["input"] is None else _short(err["input"])
            reason = f"{msg}, got {got}"
        out.append((path, reason + locate(root, loc, err["type"])))
    return out


def _physical(cell: PhysicalCellModel) -> PhysicalCellSpec:
    return PhysicalCellSpec(
        cell_type=cell.cell_type,
        address=cell.cell_address,
        pinned_cell_id=cell.pinned_cell_id,
        children=tuple(_physical(c) for c in cell.cell_children),
    )


def to_spec(model: HivedConfigModel) -> ClusterSpec:
    """The plain-data spec the core consumes; YAML order is kept, so indexes match config paths."""
    pc = model.physical_cluster
    return ClusterSpec(
        cell_types=tuple(
            CellTypeSpec(
                name,
                t.child_cell_type,
                t.child_cell_number,
                t.is_node_level,
                tuple((a, b) for a, b in t.nvlinks),
            )
            for name, t in pc.cell_types.items()
        ),
        physical_cells=tuple(_physical(c) for c in pc.physical_cells),
        virtual_clusters=tuple(
            VirtualClusterSpec(
                name=name,
                virtual_cells=tuple(
                    VirtualCellSpec(tuple(v.cell_type.split(".")), v.cell_number) for v in vc.virtual_cells
                ),
                pinned_cell_ids=tuple(p.pinned_cell_id for p in vc.pinned_cells),
            )
            for name, vc in model.virtual_clusters.items()
        ),
        namespace_vcs=tuple(model.topogang.namespace_virtual_clusters.items()),
    )
