"""One hardened way to read text that a tenant controls: pod annotations, label values, request bodies.

Anyone who can create a pod writes its annotations, and anyone who reaches the extender's port writes
its request bodies. Every such text is read here, once, under explicit limits, and what comes out is
plain, bounded data (dicts, lists, text, None) that nothing downstream has to distrust again:

- **Size** first, before any parsing: a limit in bytes per kind of input (`Limits.max_bytes`).
- **YAML** is read as a stream of parser events (libyaml's parser keeps its own stack, so it does not
  recurse), and the document is built from them here, iteratively. An admin config that libyaml
  refuses but PyYAML's pure-Python parser reads (the config loader falls back to it for its
  wording; a surrogate escape is such text) is walked again as that parser sees it
  (`check_yaml(..., pure=True)`); tenants' text is read with libyaml alone and never so. Nesting deeper than
  `Limits.max_depth` stops the read at the first event past it, before anything deep exists in memory
  (a YAML flow sequence nested 50,000 deep used to overflow the C stack of the composer and kill the
  process). Anchors, aliases, explicit tags and merge keys are refused in pod specs: HiveD's specs are
  small flat documents that never need them, and aliases are what make "billion laughs" documents
  and self-referencing structures possible. Admin configs may use aliases, but every use is counted
  as the nodes it expands to, against `Limits.max_nodes`.
- **JSON** goes through orjson (C, its own depth cap of 1,024) and then an iterative depth check.
  A pod spec written as one line of plain JSON (what tools write) is read without the YAML parser by
  `read_flat_json`, to exactly what `read_yaml` would give; any other text goes to `read_yaml`.
- **Text** must be valid Unicode: a JSON-escaped surrogate pair inside a YAML string (`"\\ud83d\\ude00"`,
  what `json.dumps` writes for an emoji) is joined into the one character it encodes, as a JSON reader
  would; a lone surrogate can never be encoded as UTF-8 and is refused, naming the field.

Scalars stay the text written (Go's yaml hands a scalar's raw text to a string field, so HiveD reads
`cellAddress: 007` as "007"); plain `~`, `null` and empty scalars are None. Every refusal is an
`UntrustedError` naming the path inside the document and the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

_CParser: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one kind of untrusted text may be: its size, its nesting, and whether YAML aliases may
    appear (and then how many nodes the document may expand to)."""

    max_bytes: int
    max_depth: int
    extras: bool = False  # YAML anchors, aliases, explicit tags and merge keys (admin configs only)
    max_nodes: int = 0  # nodes the document may expand to, aliases counted (0: 100 per byte allowed)

    def describe(self) -> str:
        return f"at most {self.max_bytes} bytes, nested at most {self.max_depth} deep"


class UntrustedError(ValueError):
    """Untrusted text that is refused; `path` names the place inside the document ("" for the whole)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


# Pod scheduling specs (HiveD's format): a few hundred bytes in practice; the deepest legal document is
# {affinityGroup: {members: [{...}]}}, four collections. 64 KiB holds a gang of ~1,000 members.
SPEC_LIMITS = Limits(max_bytes=64 * 1024, max_depth=8)
# JSON annotations of other conventions (YuniKorn task groups carry node affinity: ~12 deep) and the
# bind info topogang itself writes (the whole gang's placement): the API server's 256 KiB bound.
ANNOTATION_LIMITS = Limits(max_bytes=256 * 1024, max_depth=32)
# Admin configs: large (a 12,500-node cluster is a few MB), aliases allowed but counted.
CONFIG_LIMITS = Limits(max_bytes=64 * 1024 * 1024, max_depth=64, extras=True, max_nodes=20_000_000)
# Request bodies: kube-scheduler's objects are ~20 deep; orjson refuses to write past 255 levels, so a
# reply that echoes part of a request (full Nodes) must never hold anything deeper.
BODY_DEPTH = 64


def text_size(text: str) -> int:
    """UTF-8 bytes of `text` without encoding it (ASCII, the common case, is O(1))."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def valid_text(value: str, path: str) -> str:
    """`value`, with surrogate pairs joined; `UntrustedError` for a lone surrogate."""
    if value.isascii() or _SURROGATE.search(value) is None:
        return value
    try:
        joined = value.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        joined = value
    if _SURROGATE.search(joined) is not None:
        raise UntrustedError(path, "is not valid Unicode (a lone UTF-16 surrogate: UTF-8 cannot encode it)")
    return joined


def whole_number(text: str, digits: int = 18) -> int | None:
    """The number `text` writes in at most `digits` ASCII digits, else None. `str.isdigit` alone
    accepts what `int` refuses with a ValueError (a superscript "²", more than 4,300 digits), so a
    tenant's or a caller's text checked with it alone turns into an internal error."""
    if len(text) <= digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def check_size(text: str, limits: Limits, what: str = "") -> None:
    if len(text) > limits.max_bytes or text_size(text) > limits.max_bytes:
        raise UntrustedError(what, f"is {text_size(text)} bytes; at most {limits.max_bytes}")


# ------------------------------------------------------------------------------------------- YAML
def read_yaml(text: str, limits: Limits) -> Any:
    """The single YAML document in `text` as plain data, or `UntrustedError`. Syntax errors read as
    the pure-Python parser words them (with line and column), whichever parser found them."""
    check_size(text, limits)
    try:
        return _Builder(limits).build(yaml.parse(text, Loader=_CParser))
    except yaml.YAMLError:
        pass  # libyaml's wording is terser: find the same error again with the pure parser
    try:
        return _Builder(limits).build(yaml.parse(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        where, message = yaml_error(exc)
        raise UntrustedError("", f"{message}{f' ({where})' if where else ''}") from None
    except yaml.YAMLError as exc:
        raise UntrustedError("", f"YAML syntax error: {exc}") from None


# one line of printable ASCII, no backslash: a JSON text whose every string reads the same as YAML
_FLAT_JSON = re.compile(r"\{[ -\[\]-~]*\Z")


class _NotFlatError(ValueError):
    """A JSON text `read_flat_json` leaves to `read_yaml` (a duplicate key, NaN)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NotFlatError("duplicate key")
    return out


def _refuse_constant(name: str) -> Any:
    raise _NotFlatError(name)


_FLAT_DECODER = json.JSONDecoder(
    parse_int=str, parse_float=str, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys
)


def read_flat_json(text: str, limits: Limits) -> Any:
    """What `read_yaml` reads from `text` when `text` is a JSON object on one line of printable ASCII
    without escapes (what tools and `json.dumps` write into an annotation), read without a YAML
    parser (~5 us instead of ~40 us); None for any other text, which `read_yaml` then reads (and
    words any error of). Numbers stay the text written and true/false are text, as the YAML reader's
    text-only resolvers give them; a duplicate key, NaN or nesting past the limit is left to
    `read_yaml`. A property test holds the two readers to the same value."""
    if len(text) > limits.max_bytes or _FLAT_JSON.match(text) is None:
        return None
    try:
        doc = _FLAT_DECODER.decode(text)  # `json.loads` with these options, without a decoder per call
    except (ValueError, RecursionError):  # not JSON, _NotFlatError, or nested past Python's stack:
        return None  # `read_yaml` then stops at the depth limit with an error naming it
    todo: list[tuple[Any, int]] = [(doc, 1)]
    while todo:
        value, depth = todo.pop()
        if depth > limits.max_depth:
            return None
        for k, v in list(value.items() if type(value) is dict else enumerate(value)):
            if v is True or v is False:
                value[k] = "true" if v else "false"
            elif type(v) is dict or type(v) is list:
                todo.append((v, depth + 1))
    return doc


def check_yaml(text: str, limits: Limits, *, pure: bool = False) -> None:
    """Walk the document under `limits` without keeping it (for admin configs, which the config
    loader then reads with its own full checks). Syntax errors are left to that loader. `pure`: the
    caller reads text libyaml refuses with PyYAML's pure-Python parser (the config loader, for its
    wording), so such text is walked as that parser sees it: libyaml refuses a surrogate escape
    ("\\ud800") that parser reads, and the limits must hold for what it reads. A caller reading with
    libyaml alone (bind info) leaves it: a tenant's text would cost a pure-Python parse for nothing."""
    check_size(text, limits)
    try:
        _Builder(limits, keep=False).build(yaml.parse(text, Loader=_CParser))
        return
    except yaml.YAMLError:
        if not pure or _CParser is yaml.SafeLoader:
            return
    try:
        _Builder(limits, keep=False).build(yaml.parse(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return


def yaml_error(exc: yaml.MarkedYAMLError) -> tuple[str, str]:
    """PyYAML's problem and context as one sentence, located at the problem."""
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem, context, cm = exc.problem or "", exc.context or "", exc.context_mark
    at = f" at line {cm.line + 1}, column {cm.column + 1}" if cm and context and cm is not mark else ""
    if not context or not problem:
        text = problem or context
    elif problem.startswith("but "):  # "expected a single document in the stream" + "but found another"
        text = f"{context}{at}, {problem}"
    else:  # "expected ',' or '}', but got ':'" + "while parsing a flow mapping"
        text = f"{problem} ({context}{at})"
    return where, f"YAML syntax error: {text}"


class _Builder:
    """Plain data from parser events, with the limits checked as each event arrives."""

    def __init__(self, limits: Limits, *, keep: bool = True) -> None:
        self.limits = limits
        self.keep = keep
        self.nodes = 0
        self.max_nodes = limits.max_nodes or 100 * limits.max_bytes
        self.anchors: dict[str, int] = {}  # anchor -> nodes it expands to (closed anchors only)

    def build(self, events: Any) -> Any:
        # one frame per open collection: [container, path, key-or-None, anchor, nodes at open, lines]
        stack: list[list[Any]] = []
        root: Any = None
        documents = 0
        limits = self.limits
        for ev in events:
            kind = type(ev)
            if kind is yaml.ScalarEvent or kind is yaml.AliasEvent:
                value: Any
                if kind is yaml.AliasEvent:
                    value = self._alias(ev, stack)
                else:
                    self._node(ev, stack)
                    value = None if not ev.style and ev.value in _NULLS else ev.value
                    if value is not None:
                        value = valid_text(value, _path(stack))
                    if ev.anchor is not None:
                        self.anchors[ev.anchor] = 1
                root = self._add(stack, value, ev, root)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                self._node(ev, stack)
                if len(stack) + 1 > limits.max_depth:
                    raise UntrustedError(_path(stack), f"is nested more than {limits.max_depth} levels deep")
                container: Any = {} if kind is yaml.MappingStartEvent else []
                frame = [container, _path(stack), None, ev.anchor, self.nodes, {}]
                root = self._add(stack, container, ev, root)
                stack.append(frame)
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                frame = stack.pop()
                if frame[3] is not None:
                    self.anchors[frame[3]] = self.nodes - frame[4] + 1
            elif kind is yaml.DocumentStartEvent and self.keep:  # a config's loader words this itself
                documents += 1
                if documents > 1:
                    raise UntrustedError("", "expected a single document, but found another")
        return root

    def _node(self, ev: Any, stack: list[list[Any]]) -> None:
        self.nodes += 1
        if ev.tag is not None and not self.limits.extras:  # the parser sets a tag only where one is written
            raise UntrustedError(_path(stack), f"explicit YAML tags ({ev.tag}) are not accepted")
        if ev.anchor is not None and not self.limits.extras:
            raise UntrustedError(_path(stack), f"YAML anchors (&{ev.anchor}) are not accepted")
        if self.nodes > self.max_nodes:
            raise UntrustedError("", f"expands to more than {self.max_nodes} nodes")

    def _alias(self, ev: Any, stack: list[list[Any]]) -> Any:
        path = _path(stack)
        if not self.limits.extras:
            raise UntrustedError(path, f"YAML aliases (*{ev.anchor}) are not accepted")
        size = self.anchors.get(ev.anchor)
        if size is None:
            open_anchors = {f[3] for f in stack}
            why = "refers to itself" if ev.anchor in open_anchors else "has no anchor before it"
            raise UntrustedError(path, f"alias *{ev.anchor} {why}")
        self.nodes += size
        if self.nodes > self.max_nodes:
            raise UntrustedError("", f"expands to more than {self.max_nodes} nodes")
        return None  # the walk only checks a config (keep=False); specs refuse aliases above

    def _add(self, stack: list[list[Any]], value: Any, ev: Any, root: Any) -> Any:
        if not stack:
            return value
        frame = stack[-1]
        container = frame[0]
        if type(container) is list:
            container.append(value if self.keep else None)  # a walk still counts items for paths
            return root
        key = frame[2]
        if key is None:  # a key
            if not isinstance(value, str):
                what = "null" if value is None else "a collection"
                raise UntrustedError(frame[1], f"mapping keys must be plain text, not {what}")
            if value == "<<" and type(ev) is yaml.ScalarEvent and not ev.style and not self.limits.extras:
                raise UntrustedError(frame[1], "YAML merge keys (<<) are not accepted")
            lines = frame[5]
            line = ev.start_mark.line + 1 if ev.start_mark is not None else 0
            if value in lines:
                sub = f"{frame[1]}.{value}" if frame[1] else value
                raise UntrustedError(
                    sub,
                    f"duplicate key {value!r} at line {line} (first at line {lines[value]}); YAML would "
                    "silently keep only the last one",
                )
            lines[value] = line
            frame[2] = (value,)
            return root
        if self.keep:
            container[key[0]] = value
        frame[2] = None
        return root


def _path(stack: list[list[Any]]) -> str:
    """Where the next node goes: `affinityGroup.members[2]`."""
    if not stack:
        return ""
    frame = stack[-1]
    container, base, key = frame[0], frame[1], frame[2]
    if type(container) is list:
        return f"{base}[{len(container)}]"
    if key is None:
        return str(base)
    return f"{base}.{key[0]}" if base else str(key[0])


# ------------------------------------------------------------------------------------------- JSON
def read_json(data: str | bytes, limits: Limits) -> Any:
    """A JSON document under `limits`, or `UntrustedError`."""
    size = len(data) if isinstance(data, bytes) else text_size(data)
    if size > limits.max_bytes:
        raise UntrustedError("", f"is {size} bytes; at most {limits.max_bytes}")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UntrustedError("", f"is not JSON: {exc}") from None
    check_depth(doc, limits.max_depth)
    return doc


def check_depth(doc: object, max_depth: int, path: str = "") -> None:
    """`UntrustedError` when `doc` nests more than `max_depth` collections; iterative, and it stops at
    the first collection past the limit."""
    todo: list[tuple[object, int]] = [(doc, 1)]
    while todo:
        value, depth = todo.pop()
        if type(value) is dict:
            children: Any = value.values()
        elif type(value) is list:
            children = value
        else:
            continue
        if depth > max_depth:
            raise UntrustedError(path, f"is nested more than {max_depth} levels deep")
        for child in children:
            if type(child) is dict or type(child) is list:
                todo.append((child, depth + 1))


def printable(text: str, limit: int) -> str:
    """`text` a tenant or a caller controls, as a line of ours may carry it (an Event, the log, a
    report printed on an admin's terminal): valid UTF-8 (a lone surrogate is written as its escape),
    control characters escaped (a NUL, a newline or an ANSI escape is named, never sent), at most
    `limit` characters."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
