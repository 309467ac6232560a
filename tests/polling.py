"""Waiting for a server to come up or a state to settle, without reading a clock.

Machines here are shared and noisy, so a test never judges how long something took. It only needs a
bound on a hang: a number of tries, `interval` apart, after which it fails naming what it waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import IO

import pytest


def poll(what: str, probe: Callable[[], bool], *, tries: int, interval: float) -> None:
    """Call `probe` until it says yes; fail after `tries` calls (`probe` may fail earlier itself)."""
    for _ in range(tries):
        if probe():
            return
        time.sleep(interval)
    pytest.fail(f"gave up waiting for {what} after {tries} tries {interval} s apart")


def listen_urls(out: IO[str], lines: list[str], *, max_lines: int = 200) -> tuple[str, str] | None:
    """The read and verbs URLs a starting `topogang serve` prints ("listening on URL", then the
    `urlPrefix` line), read from its output into `lines`; None when it ends or says neither within
    `max_lines` lines (a bound on a hang in lines, not in time)."""
    for line in _lines(out, max_lines):
        lines.append(line)
        if "listening on " in line:
            url = line.split("listening on ", 1)[1].strip()
            lines.append(out.readline())  # the urlPrefix line, printed right after
            return url, lines[-1].split("urlPrefix ", 1)[-1].split("/v1/extender", 1)[0]
    return None


def _lines(out: IO[str], most: int) -> Iterator[str]:
    for _ in range(most):
        line = out.readline()
        if not line:
            return
        yield line
