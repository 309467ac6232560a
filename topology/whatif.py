"""A what-if on a live core that leaves nothing behind: the admission gate's order, `explain`'s answer
and the closer placement's comparison (`compact.py`) each place a gang to see where it would land."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from topology.cluster import Cluster
from topology.reservations import Gang


@contextmanager
def what_if(cluster: Cluster) -> Iterator[list[tuple[Gang, Gang | None]]]:
    """A transaction always rolled back, with what the state's undo log does not hold put back too:
    the gangs the body made (it lists each, with the gang of that name it displaced from the
    registry), the ids handed out meanwhile, and the not-whole windows a placement consumed. So
    nothing a later decision reads has changed, on a live core as on a copy."""
    res = cluster.reservations
    last, windows = res.last_id, dict(res.windows)
    made: list[tuple[Gang, Gang | None]] = []
    cluster.state.begin()
    try:
        yield made
    finally:
        for gang, displaced in reversed(made):
            res.remove(gang)
            if displaced is not None:
                res.add(displaced)
        cluster.state.rollback()
        res.windows.clear()
        res.windows.update(windows)
        res.rewind(last)
