"""Waiting for a server to come up or a state to settle, without reading a clock.

Machines here are shared and noisy, so a test never judges how long something took. It only needs a
bound on a hang: a number of tries, `interval` apart, after which it fails naming what it waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def poll(what: str, probe: Callable[[], bool], *, tries: int, interval: float) -> None:
    """Call `probe` until it says yes; fail after `tries` calls (`probe` may fail earlier itself)."""
    for _ in range(tries):
        if probe():
            return
        time.sleep(interval)
    pytest.fail(f"gave up waiting for {what} after {tries} tries {interval} s apart")
