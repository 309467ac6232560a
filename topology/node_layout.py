"""Which GPU of a node sits in which half: the part of the cell tree a device driver can contradict.

A DRA driver publishes each GPU with its PCIe root (`resource.kubernetes.io/pcieRoot`); the GPUs of
one root must sit in one cell just below the node (a half: one socket, one NVLink/PCIe island), or
the cell tree and the hardware disagree. This reads that level off the immutable `Topology`.
"""

from __future__ import annotations

import itertools

from topology.model import Topology


def node_halves(topo: Topology, node: str) -> dict[int, str]:
    """GPU index -> the address of its cell one level below the node (the node's own address when
    its GPUs hang directly off it), for every GPU of the Kubernetes node `node`."""
    node_cells = set(topo.node_cell)
    out: dict[int, str] = {}
    for leaf in topo.machine_leaves(node):
        path = topo.up[leaf]  # the leaf, then its ancestors
        half = path[0]
        for below, cell in itertools.pairwise(path):
            if cell in node_cells:
                half = cell if below == leaf else below
                break
        out[topo.gpu_index[leaf]] = topo.address[half]
    return out
