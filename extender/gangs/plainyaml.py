"""Block YAML of the plainest kind, read without a YAML parser: what topogang writes as bind info.

A restart reads one `pod-bind-info` annotation per bound pod, and a YAML parser (libyaml's, with
PyYAML's constructor and the limits walk of `config.untrusted`) costs ~0.35 ms each: at 80,000
GPUs in bound pods that alone is most of the time to ready. What topogang writes there
(`extender.gangs.bindinfo`, PyYAML's block style) uses a tiny part of YAML: mappings of simple keys,
block sequences, integers, `''` and plain words (letters, digits and `_./:-`, not ending in `:`).
`read_plain` reads exactly that part and answers None for anything else (a quote, a comment, flow
style, a tab, a duplicate key, a word the YAML resolver would not read as a string, ...), and the
caller then reads the text with the full parser.
Within that part, the value is the one `yaml.safe_load` gives (a property test holds the two side by
side), so which reader read a text never changes what it means.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
# a colon inside a word is the word's in block YAML (a one-pod gang is `<namespace>/pod:<pod>`); one
# at its end would start a mapping value, so the parser decides those
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_./:-]*(?<!:)\Z")
MAX_DEPTH = 16  # deeper than anything topogang writes: the full parser (and its limits) decides
# longer than any word topogang writes (a gang is namespace/name, 253 characters each): the cache of
# words read below stays small whatever a tenant writes into its pod's annotations
MAX_WORD = 600
CACHED_WORDS = 16384
_STR = "tag:yaml.org,2002:str"
_resolver = yaml.resolver.Resolver()


class _NotPlainError(Exception):
    """The text leaves the plain part of YAML: the full parser must read it."""


@functools.lru_cache(maxsize=CACHED_WORDS)
def _is_str(word: str) -> bool:
    """Whether YAML reads this plain word as a string (not yes/no/on/off/null/...): PyYAML's own
    implicit resolvers decide."""
    return bool(_resolver.resolve(yaml.ScalarNode, word, (True, False)) == _STR)  # type: ignore[no-untyped-call]


_NOT = object()  # not a plain scalar


@functools.lru_cache(maxsize=CACHED_WORDS)
def _atom(text: str) -> Any:
    """An integer or a string (node names, cell types and GPU indices repeat from pod to pod)."""
    if _INT.match(text):
        return int(text)
    if _WORD.match(text) and _is_str(text):
        return text
    return _NOT


def _scalar(text: str) -> Any:
    if text == "''":
        return ""
    if text == "[]":
        return []
    if text == "{}":
        return {}
    got = _atom(text) if len(text) <= MAX_WORD else _NOT
    if got is _NOT:
        raise _NotPlainError
    return got


class _Reader:
    def __init__(self, text: str) -> None:
        if not text.endswith("\n") or "\r" in text or "\t" in text:
            raise _NotPlainError
        self.lines: list[tuple[int, str]] = []
        for line in text[:-1].split("\n"):
            body = line.lstrip(" ")
            if not body or body != body.rstrip():
                raise _NotPlainError  # blank lines, trailing spaces: leave them to the parser
            self.lines.append((len(line) - len(body), body))
        self.i = 0

    def node(self, indent: int, depth: int) -> Any:
        if depth > MAX_DEPTH or self.i >= len(self.lines):
            raise _NotPlainError
        at, body = self.lines[self.i]
        if at != indent:
            raise _NotPlainError
        return self.sequence(indent, depth) if body.startswith("- ") else self.mapping(indent, depth)

    def sequence(self, indent: int, depth: int) -> list[Any]:
        out: list[Any] = []
        while self.i < len(self.lines):
            at, body = self.lines[self.i]
            if at != indent or not body.startswith("- "):
                break
            rest = body[2:]
            if rest.startswith((" ", "- ")):
                raise _NotPlainError
            if ":" in rest:  # "- key: value": a mapping whose first line is the rest
                self.lines[self.i] = (indent + 2, rest)
                out.append(self.mapping(indent + 2, depth + 1))
            else:
                out.append(_scalar(rest))
                self.i += 1
        return out

    def mapping(self, indent: int, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while self.i < len(self.lines):
            at, body = self.lines[self.i]
            if at != indent:
                if at > indent:
                    raise _NotPlainError
                break
            if body.startswith("- "):
                break
            key, sep, value = body.partition(": ")
            if not sep:
                if not body.endswith(":"):
                    raise _NotPlainError
                key = body[:-1]
            if len(key) > MAX_WORD or not _KEY.match(key) or not _is_str(key) or key in out:
                raise _NotPlainError
            self.i += 1
            if sep:
                out[key] = _scalar(value)
                continue
            if self.i >= len(self.lines):
                raise _NotPlainError  # a key with no value (null): the parser's
            nxt, nbody = self.lines[self.i]
            if nxt > indent:
                out[key] = self.node(nxt, depth + 1)
            elif nxt == indent and nbody.startswith("- "):
                out[key] = self.sequence(indent, depth + 1)
            else:
                raise _NotPlainError
        return out


def read_plain(text: str) -> Any | None:
    """The document, when `text` is plain block YAML as above; None when the full parser must read it."""
    try:
        reader = _Reader(text)
        if not reader.lines:
            return None
        doc = reader.node(0, 1)
        if reader.i != len(reader.lines):
            return None
        return doc
    except _NotPlainError:
        return None
