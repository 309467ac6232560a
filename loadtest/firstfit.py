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
