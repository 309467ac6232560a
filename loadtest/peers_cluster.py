"""The cluster `make bench-peers` builds on the e2e control plane, as each system is told about it.

- The nodes: the simulator's shared cluster (`simulate.cluster.shared_cluster`: 80 nodes x 8 GPUs in
  racks of 8, the Philly VC quotas scaled to it), written as a topogang config (`topology_config`)
  that `scripts/e2e/fake_nodes.py` turns into KWOK nodes named as the simulator names them
  (`r01-n1`, ...) and the topogang arm's extender loads. Each node then gets the rack label
  `RACK_LABEL` (`kubernetes.io/hostname` it has already): the two levels of Kueue's Topology.
- A namespace per VC (`namespace_of`), mapped to its VC for topogang; for Kueue a LocalQueue in it
  feeding the VC's ClusterQueue (`kueue_objects`).
- KWOK's stage `COMPLETE_STAGE`: a pod that carries the annotation `COMPLETE_AT` (an RFC 3339 time)
  succeeds at that time. The bench sets it once the pod is bound, to its traced run time stretched by
  the simulator's locality model for the placement it got.
"""

from __future__ import annotations

from typing import Any

import yaml

from config.schema import BEST_EFFORT_FIFO, STRICT_FIFO
from loadtest.simulate.cluster import HALF, LEAF, NODE, RACK, SWITCH, SimCluster

RACK_LABEL = "topogang.io/rack"
HOST_LABEL = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
COMPLETE_AT = "pod-complete.stage.kwok.x-k8s.io/delay"
COHORT = "philly"
FLAVOR = "gpu-rack"
TOPOLOGY = "racks"
LOCAL_QUEUE = "jobs"
FLAVOR_LABEL = "type"  # fake_nodes.py labels every node type=kwok
FLAVOR_VALUE = "kwok"


def namespace_of(vc: str) -> str:
    return f"vc-{vc}"


def cluster_queue_of(vc: str) -> str:
    return f"cq-{vc}"


def rack_name(cluster: SimCluster, node: int) -> str:
    return f"rack-{cluster.rack_of(node) + 1:02d}"


def topology_config(cluster: SimCluster, reservation_ttl: int = 300, vc_queueing: str = STRICT_FIFO) -> str:
    """The topogang (HiveD-format) config of the simulator's cluster: same node names, node shape,
    racks and VC quotas (whole nodes), each VC's namespace mapped to it; `vc_queueing` is
    `topogang.vcQueueing` (written only when it is not the default)."""
    racks: dict[int, list[str]] = {}
    for n, name in enumerate(cluster.node_names):
        racks.setdefault(cluster.rack_of(n), []).append(name)
    data: dict[str, Any] = {
        "physicalCluster": {
            "cellTypes": {
                SWITCH: {"childCellType": LEAF, "childCellNumber": 2},
                HALF: {"childCellType": SWITCH, "childCellNumber": 2},
                NODE: {"childCellType": HALF, "childCellNumber": 2, "isNodeLevel": True},
                RACK: {"childCellType": NODE, "childCellNumber": cluster.rack_size},
            },
            "physicalCells": [
                {"cellType": RACK, "cellChildren": [{"cellAddress": a} for a in racks[r]]}
                for r in sorted(racks)
            ],
        },
        "virtualClusters": {
            vc: {"virtualCells": [{"cellType": f"{RACK}.{NODE}", "cellNumber": n}]}
            for vc, n in sorted(cluster.quotas.items())
            if n > 0
        },
        "topogang": {
            "namespaceVirtualClusters": {
                namespace_of(vc): vc for vc, n in sorted(cluster.quotas.items()) if n > 0
            },
            "reservationTtlSeconds": reservation_ttl,
            **({} if vc_queueing == STRICT_FIFO else {"vcQueueing": vc_queueing}),
        },
    }
    head = "# make bench-peers: the simulator's shared cluster (loadtest/peers_cluster.py)\n"
    return head + yaml.safe_dump(data, sort_keys=False)


COMPLETE_STAGE = f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete-at
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.annotations["{COMPLETE_AT}"]'
      operator: 'Exists'
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["{COMPLETE_AT}"]'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $root := . }}}}
      containerStatuses:
      {{{{ range $index, $item := .spec.containers }}}}
      - image: {{{{ $item.image | Quote }}}}
        name: {{{{ $item.name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{{{ $now | Quote }}}}
            reason: Completed
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: Succeeded
"""


def kueue_objects(cluster: SimCluster, queueing: str = BEST_EFFORT_FIFO) -> list[tuple[str, dict[str, Any]]]:
    """(API path, object) for Kueue, in creation order: the Topology (rack, host), the ResourceFlavor
    that uses it, a ClusterQueue per VC (nominal quota = its GPUs, one cohort, borrowing without limit,
    reclaim from any borrower, borrowing never preempts: all trace jobs have one priority) and a
    LocalQueue in each VC's namespace."""
    base = "/apis/kueue.x-k8s.io/v1beta2"
    out: list[tuple[str, dict[str, Any]]] = [
        (
            f"{base}/topologies",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Topology",
                "metadata": {"name": TOPOLOGY},
                "spec": {"levels": [{"nodeLabel": RACK_LABEL}, {"nodeLabel": HOST_LABEL}]},
            },
        ),
        (
            f"{base}/resourceflavors",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": FLAVOR},
                "spec": {"nodeLabels": {FLAVOR_LABEL: FLAVOR_VALUE}, "topologyName": TOPOLOGY},
            },
        ),
    ]
    for vc, nodes in sorted(cluster.quotas.items()):
        if nodes <= 0:
            continue
        out.append(
            (
                f"{base}/clusterqueues",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": {"name": cluster_queue_of(vc)},
                    "spec": {
                        "cohortName": COHORT,
                        "namespaceSelector": {},
                        "queueingStrategy": queueing,
                        "resourceGroups": [
                            {
                                "coveredResources": [GPU],
                                "flavors": [
                                    {
                                        "name": FLAVOR,
                                        "resources": [
                                            {"name": GPU, "nominalQuota": nodes * cluster.gpus_per_node}
                                        ],
                                    }
                                ],
                            }
                        ],
                        "preemption": {
                            "reclaimWithinCohort": "Any",
                            "borrowWithinCohort": {"policy": "LowerPriority"},
                            "withinClusterQueue": "LowerPriority",
                        },
                    },
                },
            )
        )
    for vc in sorted(vc for vc, n in cluster.quotas.items() if n > 0):
        ns = namespace_of(vc)
        out.append(
            (
                f"{base}/namespaces/{ns}/localqueues",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": LOCAL_QUEUE, "namespace": ns},
                    "spec": {"clusterQueue": cluster_queue_of(vc)},
                },
            )
        )
    return out
