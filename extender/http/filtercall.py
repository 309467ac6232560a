"""The filter's call into the core: one call, split in two only when GPUs must be held in between.

A filter may let a gang go (a superseded framework attempt, a gang its pod left) and place its own
gang in the same call (`topology.asks.filter_member`). GPUs that release frees may be claimed by a
pod the Kubernetes mode holds them for as soon as they free (`extender.kube.unverified`); the
lock's hook holds them each time the lock is taken, which a release inside this one hold would
skip. So while the hook has work waiting, the release and the placement are two calls with the
hook between them; otherwise the verb stays one call.
"""

from __future__ import annotations

import dataclasses

from extender.http.versionlock import VersionedLock
from topology.asks import FilterAnswer, FilterAsk
from topology.core import Core


def filter_call(core: Core, ask: FilterAsk, now: float, lock: VersionedLock) -> FilterAnswer:
    """`core.filter(ask)`, with the lock's pending hook run after what the ask lets go is released
    and before anything is placed. Called under `lock`."""
    hook = lock.on_acquire
    if hook is None or not ask.place or (ask.supersede is None and ask.abandon is None) or not lock.pending():
        return core.filter(ask, now)
    let_go = core.filter(dataclasses.replace(ask, place=False), now)
    hook()
    placed = core.filter(dataclasses.replace(ask, supersede=None, abandon=None), now)
    return dataclasses.replace(placed, released=let_go.released + placed.released)
