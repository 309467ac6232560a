"""Findings about a config, and the one line each becomes on a terminal.

Errors and warnings share `topology.layout.Problem` (a config path and a message) so every check,
in the loader or the validator, reports the same way; a warning is the `ConfigWarning` subclass, which
makes "is this config usable?" a type test rather than a string convention.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from topology.layout import Problem


@dataclass(frozen=True, slots=True)
class ConfigWarning(Problem):
    """A finding that does not stop the config from loading (an unknown key, an unused pin)."""


def is_warning(problem: Problem) -> bool:
    return isinstance(problem, ConfigWarning)


def errors_of(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if not is_warning(p)]


def warnings_of(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if is_warning(p)]


def format_line(file: str, path: str, reason: str) -> str:
    """`FILE: path.to.field: reason`, or `FILE: reason` for file-level problems (no path)."""
    return f"{file}: {path}: {reason}" if path else f"{file}: {reason}"


def format_problem(file: str, problem: Problem) -> str:
    """Errors as `FILE: path: reason`; warnings as `FILE: path: warning: reason`."""
    reason = f"warning: {problem.message}" if is_warning(problem) else problem.message
    return format_line(file, problem.path, reason)


def did_you_mean(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str:
    """` (did you mean 'X'?)` for the closest of `choices`, or "" when none is close.

    Every name a config refers to (a cell type, a chain, a pinned id, a VC) gets this hint when it
    is unknown, so a typo costs one look at the message, not a search through the file."""
    import difflib

    near = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=cutoff)
    return f" (did you mean {near[0]!r}?)" if near else ""
