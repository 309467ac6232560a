"""The cyclic garbage collector held off while a batch builds a large, long-lived structure.

A restart rebuilds every gang from the bound pods it lists (`extender.kube.sync`): at 80,000 GPUs
that is ~60,000 pods, each listed as a nest of dicts, and a core that grows by ~900,000 objects as
it adopts them. CPython starts a full collection each time the objects that survived earlier ones
grow by a quarter, and each walks everything alive: the pod list and the core so far. A restart at
that scale ran 18 of them, about a quarter of its recovery; building the topology model of a
12,500-node config ran 6 more. Almost nothing built there is garbage (what is, is freed by its
reference count), so such a batch runs without the collector, which then resumes as it was; the
first collection after the batch sees what the batch left, as any later one would.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block without automatic cyclic collections; the collector is as it was afterwards,
    even when the block raises. The pause is the whole process's: for a phase such as the start,
    when the block's own work is what runs (an `await` inside lets other tasks run unpaused too)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
