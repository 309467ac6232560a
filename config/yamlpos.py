"""Where in the YAML a shape error sits, and the likely indentation slip behind it.

The pydantic check works on plain data and knows only the config path; an admin reading
`Input should be a mapping of keys, got 'true'` wants the line, and, when a key slid left by two
spaces (`isNodeLevel: true` under `cellTypes` instead of under its type), to be told so. This module
walks the composed YAML node tree along the error's location and words both.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml
from pydantic import BaseModel

from config.schema import (
    CellTypeModel,
    HivedConfigModel,
    PhysicalCellModel,
    PhysicalClusterModel,
    PinnedCellModel,
    TopogangModel,
    VirtualCellModel,
    VirtualClusterModel,
)

# the YAML keys of each part of the file, and what an admin calls that part
_OWNERS: tuple[tuple[type[BaseModel], str], ...] = (
    (CellTypeModel, "a cell type"),
    (PhysicalCellModel, "a physical cell"),
    (VirtualCellModel, "a virtualCells entry"),
    (PinnedCellModel, "a pinnedCells entry"),
    (VirtualClusterModel, "a virtual cluster"),
    (PhysicalClusterModel, "physicalCluster"),
    (TopogangModel, "the topogang section"),
    (HivedConfigModel, "the top level"),
)
# mappings whose keys are names the admin chooses: a field's key there has slid out of its entry
_NAMED = frozenset({"cellTypes", "virtualClusters"})
MAPPING_EXPECTED = frozenset({"model_type", "model_attributes_type", "dict_type"})


def _owner_of(key: str) -> str | None:
    for model, words in _OWNERS:
        if any((f.alias or name) == key for name, f in model.model_fields.items()):
            return words
    return None


def _at(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _walk(root: yaml.Node, loc: Sequence[int | str]) -> tuple[yaml.MappingNode | None, int, yaml.Node | None]:
    """The mapping holding the last key of `loc`, that key's index in it, and the node at `loc`.

    (None, -1, node) when the last step is a list position; (…, -1, None) when the path leaves the
    document (a missing key: the node returned as the mapping is the one that lacks it)."""
    node: yaml.Node | None = root
    parent: yaml.MappingNode | None = None
    index = -1
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(node, yaml.MappingNode):
            parent, index = node, -1
            for i, (k, _v) in enumerate(node.value):
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    index = i  # the last one wins, as in the constructed document
            node = node.value[index][1] if index >= 0 else None
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            parent, index, node = None, -1, node.value[part]
        else:
            return parent, -1, None
    return parent, index, node


def _holds_keys(node: yaml.Node) -> bool:
    """A mapping, or an empty value: an entry a slid-out key may have belonged to."""
    return isinstance(node, yaml.MappingNode) or _is_empty(node)


def _is_empty(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.value == "" and node.tag.endswith(":null")


def locate(root: yaml.Node | None, loc: Sequence[int | str], kind: str) -> str:
    """` (line L, column C)` for the error at `loc`, plus an indentation hint where one is likely."""
    if root is None:
        return ""
    parent, index, node = _walk(root, loc)
    if node is None:
        return f" (in the mapping at {_at(parent.start_mark)})" if parent is not None else ""
    key = parent.value[index][0] if parent is not None and index >= 0 else None
    where = key if key is not None else node
    text = f" ({_at(where.start_mark)})"
    steps = [p for p in loc if p != "[key]"]
    named = len(steps) >= 2 and steps[-2] in _NAMED
    if kind in MAPPING_EXPECTED and not isinstance(node, yaml.MappingNode) and key is not None and parent:
        hint = _indent_hint(parent, index, key.value, named=named)
        if hint:
            text += f"; {hint}"
    return text


def _indent_hint(parent: yaml.MappingNode, index: int, name: str, *, named: bool) -> str:
    key, value = parent.value[index]
    owner = _owner_of(name) if named else None
    if owner is not None:
        prev = next(
            ((k, v) for k, v in reversed(parent.value[:index]) if _holds_keys(v)),
            None,
        )
        if prev is None:
            return f"{name!r} is a key of {owner}, not a name here: is it indented too little?"
        pk, pv = prev
        block = isinstance(pv, yaml.MappingNode) and pv.value and not pv.flow_style
        column = pv.value[0][0].start_mark.column + 1 if block else pk.start_mark.column + 3
        return (
            f"{name!r} is a key of {owner}, not a name here: it looks indented too little; indent it to "
            f"column {column} to put it under {pk.value!r} ({_at(pk.start_mark)})"
        )
    if _is_empty(value):
        after = parent.value[index + 1][0] if index + 1 < len(parent.value) else None
        if after is not None and after.start_mark.column <= key.start_mark.column:
            return (
                f"nothing is indented under {name!r}; if the lines from {_at(after.start_mark)} on are "
                f"its keys, indent them further than {name!r} (column {key.start_mark.column + 1})"
            )
        return f"{name!r} has no value: its keys go on the lines below, indented further than it"
    if isinstance(value, yaml.ScalarNode):
        return (
            f"{name!r} needs a mapping: its keys on the lines below it, indented further, not the value "
            f"{value.value!r} after the colon"
        )
    return f"{name!r} needs a mapping (its keys on the lines below it, indented further), not a list"
