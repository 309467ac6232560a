"""Create KWOK fake GPU nodes for the e2e control plane from a topogang/HiveD topology config.

One Node per node-level physical cell: name = the cell's address (the Kubernetes node name),
`nvidia.com/gpu` capacity = the GPUs under that cell. KWOK (`--manage-all-nodes`) then marks them Ready
and runs pods bound to them. Used by scripts/e2e/cluster-up.sh (which puts the repo on PYTHONPATH);
recipe §2.4 (see scripts/e2e/README.md).

    python scripts/e2e/fake_nodes.py --config config/examples/example-cluster.yaml \
        --kubeconfig WORKDIR/admin.kubeconfig --out WORKDIR/nodes.json [--wait 60]
    python scripts/e2e/fake_nodes.py --config ... --print      # just print the Node objects (no cluster)

Address plan (all fake, never routed; tests only talk to 127.0.0.1), kept disjoint from each other:
node InternalIPs 10.32.0.0/12, per-node podCIDRs = the i-th /24 of 10.128.0.0/10, kwok's fallback pod CIDR
10.200.0.0/16 (cluster-up.sh), service range 10.96.0.0/16 (kube-apiserver).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from config.load import load_config
from topology.layout import expand, type_infos

NODE_IP_RANGE = ipaddress.ip_network("10.32.0.0/12")
POD_CIDR_RANGE = ipaddress.ip_network("10.128.0.0/10")
GPU_RESOURCE = "nvidia.com/gpu"


def _label_value(text: str) -> str:
    """A valid label value: [A-Za-z0-9._-], at most 63 chars, alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:63]
    return cleaned.strip("._-")


def fake_nodes(config_path: str | Path) -> list[dict[str, Any]]:
    """The Node objects (as dicts) for every node-level cell of the config, in config order."""
    spec = load_config(config_path).spec
    types = type_infos(spec)
    layout = expand(spec, types)
    if layout.problems:
        raise ValueError(f"{config_path}: {layout.problems[0].path}: {layout.problems[0].message}")
    subnets = POD_CIDR_RANGE.subnets(new_prefix=24)
    nodes: list[dict[str, Any]] = []
    for cell in layout.cells:
        info = types[cell.cell_type]
        if not info.is_node_level or cell.node is None:
            continue
        i = len(nodes)
        name = cell.node
        gpus = str(info.leaf_count)
        resources = {
            "cpu": "96",
            "memory": "1Ti",
            "pods": "110",  # NodeResourcesFit rejects every pod on a node without `pods`
            "ephemeral-storage": "10Ti",
            GPU_RESOURCE: gpus,
        }
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "nvidia.com/gpu.product": _label_value(info.leaf_type),
                        "nvidia.com/gpu.count": gpus,
                        "topogang.io/chain": _label_value(cell.chain),
                        "topogang.io/cell-type": _label_value(cell.cell_type),
                    },
                    "annotations": {
                        "kwok.x-k8s.io/node": "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                        "topogang.io/cell-address": cell.address,
                    },
                },
                # No kwok NoSchedule taint: every node here is fake, so nothing needs keeping off them.
                "spec": {"podCIDR": str(next(subnets))},
                # Status is kept on create (and only then): kwok's node-initialize stage keeps capacity and
                # allocatable and adds the conditions.
                "status": {
                    "capacity": resources,
                    "allocatable": dict(resources),
                    "addresses": [
                        {"type": "InternalIP", "address": str(NODE_IP_RANGE[i + 1])},
                        {"type": "Hostname", "address": name},
                    ],
                },
            }
        )
    return nodes


def _ready(node: Any) -> bool:
    conditions = node.status.conditions or [] if node.status else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def create_and_wait(nodes: list[dict[str, Any]], kubeconfig: str, wait: float) -> None:
    from kubernetes import client, config  # only needed with a cluster

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    core = client.CoreV1Api(api)
    for node in nodes:
        core.create_node(client.V1Node.model_validate(node))
    names = {str(n["metadata"]["name"]) for n in nodes}
    deadline = time.monotonic() + wait
    while True:
        ready = {n.metadata.name for n in core.list_node().items if n.metadata and _ready(n)}
        missing = sorted(names - ready)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"fake_nodes: not Ready after {wait:.0f}s: {', '.join(missing[:10])}")
        time.sleep(0.25)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--config", required=True, help="topology config (HiveD format)")
    ap.add_argument("--kubeconfig", help="admin kubeconfig of the e2e cluster")
    ap.add_argument("--out", help="write a summary (name -> GPUs) as JSON here")
    ap.add_argument("--wait", type=float, default=60.0, help="seconds to wait for Ready=True")
    ap.add_argument("--print", action="store_true", help="print the Node objects and exit")
    args = ap.parse_args(argv)
    nodes = fake_nodes(args.config)
    if args.print:
        json.dump(nodes, sys.stdout, indent=1)
        print()
        return 0
    if not args.kubeconfig:
        ap.error("--kubeconfig is required unless --print")
    create_and_wait(nodes, args.kubeconfig, args.wait)
    if args.out:
        summary = {
            str(n["metadata"]["name"]): {
                "gpus": int(n["status"]["capacity"][GPU_RESOURCE]),
                "labels": n["metadata"]["labels"],
                "cellAddress": n["metadata"]["annotations"]["topogang.io/cell-address"],
            }
            for n in nodes
        }
        Path(args.out).write_text(json.dumps({"config": str(args.config), "nodes": summary}, indent=1) + "\n")
    print(f"fake_nodes: {len(nodes)} nodes Ready", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
