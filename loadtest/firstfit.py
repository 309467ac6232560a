"""A naive, topology-blind first-fit scheduler: the baseline every comparison is made against.

It knows only how many GPUs each node has free. A job of ≤ one node's GPUs takes the first node with
enough free; a bigger job takes the first nodes with a whole node free. No quotas, no topology.
"""

from __future__ import annotations


class FirstFit:
    def __init__(self, gpus_per_node: list[int]) -> None:
        self.capacity = list(gpus_per_node)
        self.free = list(gpus_per_node)
        self.jobs: dict[int, list[tuple[int, int]]] = {}

    def place(self, job: int, pods: list[int]) -> bool:
        """Place every pod (GPUs each) or nothing; True when placed."""
        taken: list[tuple[int, int]] = []
        free = self.free
        for g in pods:
            for n in range(len(free)):
                if free[n] >= g:
                    free[n] -= g
                    taken.append((n, g))
                    break
            else:
                for n, k in taken:
                    free[n] += k
                return False
        self.jobs[job] = taken
        return True

    def release(self, job: int) -> None:
        for n, g in self.jobs.pop(job, []):
            self.free[n] += g


class IndexedFirstFit:
    """`FirstFit` that also names the GPUs it hands out: the lowest-numbered free ones of the node,
    as a topology-blind scheduler counting devices would. Used by the trace simulator, whose
    locality metrics need GPU indices; the benchmark keeps the cheaper `FirstFit`."""

    def __init__(self, gpus_per_node: list[int]) -> None:
        self.capacity = list(gpus_per_node)
        self.free_gpus: list[list[int]] = [list(range(g)) for g in gpus_per_node]
        self.jobs: dict[int, list[tuple[int, tuple[int, ...]]]] = {}

    def place(self, job: int, pods: list[int]) -> list[tuple[int, tuple[int, ...]]] | None:
        """Place every pod (GPUs each) on the first node with enough free GPUs, or nothing."""
        taken: list[tuple[int, tuple[int, ...]]] = []
        free = self.free_gpus
        for g in pods:
            for n, gpus in enumerate(free):
                if len(gpus) >= g:
                    got = tuple(gpus[:g])
                    del gpus[:g]
                    taken.append((n, got))
                    break
            else:
                for n, got in taken:
                    free[n] = sorted(free[n] + list(got))
                return None
        self.jobs[job] = taken
        return taken

    def release(self, job: int) -> None:
        for n, got in self.jobs.pop(job, []):
            self.free_gpus[n] = sorted(self.free_gpus[n] + list(got))
