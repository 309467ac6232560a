"""Runs HiveD's algorithm test table (`cases.yaml`) against a real `topogang serve` over HTTP.

HiveD's own test calls its algorithm in-process: `Schedule(pod, suggestedNodes, PreemptingPhase)`,
`AddAllocatedPod`, `DeleteAllocatedPod`, `setBadNode`. Here each becomes what a cluster would send:

- schedule: `POST /v1/extender/filter` with the suggested nodes. One node back means the gang is
  placed: `POST /v1/extender/bind` there, and the pod's GPUs are read from the bind annotations the
  binder recorded. Otherwise `POST /v1/extender/preempt` (HiveD's Preempting phase, kube-scheduler's
  preemption call) names the victims, or nobody (the pod waits). An `Error` is HiveD's user error.
- delete: `DELETE /v1/standalone/pods/{uid}`; node health: `PUT /v1/standalone/nodes/{name}`;
- reconfiguration: the config file is rewritten and the server's hot reload applies it.

The server runs with `--keep-victims`: victims stay until a step deletes them, as in HiveD's test
(there kube-scheduler deletes them, never HiveD). Each scenario gets a fresh server, as each of
HiveD's test functions builds a fresh `HivedAlgorithm`.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.integration.conftest import ROOT, running_server
from tests.polling import poll

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "hivedscheduler.yaml"  # HiveD's design config, byte for byte
CASES = HERE / "cases.yaml"
NAMESPACE = "test"
ENABLE = "hivedscheduler.microsoft.com/pod-scheduling-enable"
SPEC = "hivedscheduler.microsoft.com/pod-scheduling-spec"
ISOLATION = "hivedscheduler.microsoft.com/pod-leaf-cell-isolation"
RELOAD_POLL = "0.1"


def load_cases() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CASES.read_text())
    return doc


def pod_spec(cases: Mapping[str, Any], name: str) -> dict[str, Any]:
    """HiveD's PodSchedulingSpec for one pod of the table, every field written as the Go test does."""
    vc, priority, lazy, pinned, leaf_type, leaves, group = cases["pods"][name]
    return {
        "virtualCluster": vc,
        "priority": priority,
        "lazyPreemptionEnable": lazy,
        "pinnedCellId": pinned,
        "leafCellType": leaf_type,
        "leafCellNumber": leaves,
        "gangReleaseEnable": False,
        "ignoreK8sSuggestedNodes": False,
        "affinityGroup": {
            "name": group,
            "members": [{"podNumber": p, "leafCellNumber": n} for p, n in cases["groups"][group]],
        },
    }


def pod_object(cases: Mapping[str, Any], name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": name,
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {SPEC: yaml.safe_dump(pod_spec(cases, name), sort_keys=False)},
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": {ENABLE: "1"}}}]},
        "status": {"phase": "Pending"},
    }


# ------------------------------------------------------------------------------ config edits
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _path(path: str) -> list[str | int]:
    """`a.b[3].c` -> ["a", "b", 3, "c"]; keys may hold dashes (`DGX2-V100-NODE`), never dots."""
    return [int(i) if i else k for k, i in _STEP.findall(path)]


def edited(config: Mapping[str, Any], edits: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The config with HiveD's test edits applied ({set|drop|append: PATH, value})."""
    doc: Any = copy.deepcopy(dict(config))
    for e in edits:
        op = next(k for k in ("set", "drop", "append") if k in e)
        *parents, last = _path(e[op])
        node = doc
        for step in parents:
            node = node[step]
        if op == "set":
            node[last] = copy.deepcopy(e["value"])
        elif op == "drop":
            del node[last]
        else:
            node[last].append(copy.deepcopy(e["value"]))
    out: dict[str, Any] = doc
    return out


def design_config() -> dict[str, Any]:
    """HiveD's design config, run with HiveD's order among a VC's gangs: whichever fits starts
    (topogang's default, StrictFIFO, keeps a VC's later gangs behind its oldest waiting one; the
    table's "normal operations" step 13 binds pod18 while an older gang of VC2 waits)."""
    doc: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    doc.setdefault("topogang", {})["vcQueueing"] = "BestEffortFIFO"
    return doc


# ------------------------------------------------------------------------------ the server
@dataclass
class Outcome:
    """What one schedule step came to, in the table's words."""

    kind: str  # bind | preempt | wait | error | preemptible
    node: str | None = None
    gpus: tuple[int, ...] = ()
    victims: tuple[str, ...] = ()
    text: str = ""

    def as_expected(self) -> Any:
        if self.kind == "bind":
            return {"bind": [self.node, list(self.gpus)]}
        if self.kind == "preempt":
            return {"preempt": sorted(self.victims)}
        return self.kind


class Cluster:
    """One scenario's server, driven as kube-scheduler and the test's pod lifecycle would."""

    def __init__(self, client: httpx.Client, cases: Mapping[str, Any], config_file: Path) -> None:
        self.client = client
        self.cases = cases
        self.config_file = config_file
        self.nodes: list[str] = list(self._node_names())

    def _node_names(self) -> Iterator[str]:
        seen: set[str] = set()

        def walk(cell: Mapping[str, Any]) -> Iterator[str]:
            name = cell.get("nodeName")
            if name is not None and name not in seen:
                seen.add(name)
                yield name
            for kid in cell.get("cellChildren") or ():
                yield from walk(kid)

        for top in self.client.get("/v1/inspect/clusterstatus/physicalcluster").json():
            yield from walk(top)

    def suggested(self, spec: Any) -> list[str]:
        if spec is None or spec == "all":
            return list(self.nodes)
        if isinstance(spec, Mapping):
            drop = set(spec["all_but"])
            return [n for n in self.nodes if n not in drop]
        return list(spec)

    def filter(self, pod: str, nodes: list[str]) -> dict[str, Any]:
        body = {"Pod": pod_object(self.cases, pod), "Nodes": None, "NodeNames": nodes}
        r = self.client.post("/v1/extender/filter", json=body)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    def filter_outcome(self, pod: str, nodes: list[str]) -> Outcome:
        """The filter verb alone (HiveD's Filtering phase)."""
        got = self.filter(pod, nodes)
        if got["Error"]:
            return Outcome("error", text=got["Error"])
        if got["NodeNames"]:
            return Outcome("fits", node=got["NodeNames"][0])
        text = json.dumps(got["FailedNodes"])
        return Outcome("preemptible" if "preempt" in text else "wait", text=text)

    def schedule(self, pod: str, nodes: list[str]) -> Outcome:
        """HiveD's `Schedule(pod, nodes, PreemptingPhase)` then `AddAllocatedPod`, over the wire."""
        got = self.filter(pod, nodes)
        if got["Error"]:
            return Outcome("error", text=got["Error"])
        if got["NodeNames"]:
            return self.bind(pod, self.best(pod, got["NodeNames"]))
        meta = {n: {"Pods": [], "NumPDBViolations": 0} for n in nodes}
        body = {"Pod": pod_object(self.cases, pod), "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
        r = self.client.post("/v1/extender/preempt", json=body)
        if r.status_code == 400:
            return Outcome("error", text=r.text)
        assert r.status_code == 200, r.text
        victims = r.json()["NodeNameToMetaVictims"] or {}
        uids = sorted({p["UID"] for v in victims.values() for p in v["Pods"]})
        if uids:
            return Outcome("preempt", victims=tuple(uids))
        again = self.filter(pod, nodes)  # a preemption that found free cells after all binds now
        if again["NodeNames"]:
            return self.bind(pod, self.best(pod, again["NodeNames"]))
        return Outcome("wait", text=json.dumps(got["FailedNodes"]))

    def best(self, pod: str, nodes: list[str]) -> str:
        """kube-scheduler's pick among the pod's open slots: the extender's highest score, the first
        listed on a tie (HiveD answers one node; topogang lists every node with an open slot)."""
        if len(nodes) == 1:
            return nodes[0]
        body = {"Pod": pod_object(self.cases, pod), "Nodes": None, "NodeNames": nodes}
        r = self.client.post("/v1/extender/prioritize", json=body)
        assert r.status_code == 200, r.text
        scores = {h["Host"]: h["Score"] for h in r.json()}
        return max(nodes, key=lambda n: (scores.get(n, 0), -nodes.index(n)))

    def bind(self, pod: str, node: str) -> Outcome:
        body = {"PodName": pod, "PodNamespace": NAMESPACE, "PodUID": pod, "Node": node}
        r = self.client.post("/v1/extender/bind", json=body)
        assert r.status_code == 200 and not r.json()["Error"], r.text
        node, gpus = self.bound(pod)
        return Outcome("bind", node=node, gpus=gpus)

    def bound(self, pod: str) -> tuple[str, tuple[int, ...]]:
        """Where the binder has the pod now (it is still running there)."""
        b = self.client.get("/v1/standalone/bindings").json()[pod]
        return b["node"], tuple(int(g) for g in b["annotations"][ISOLATION].split(","))

    def delete(self, pods: list[str]) -> None:
        for pod in pods:
            r = self.client.delete(f"/v1/standalone/pods/{pod}")
            assert r.status_code == 200, r.text

    def node_health(self, node: str, ready: bool) -> None:
        r = self.client.put(f"/v1/standalone/nodes/{node}", json={"ready": ready})
        assert r.status_code == 200, r.text

    def group_state(self, group: str) -> str:
        # gang names are per namespace (docs/hived-conformance.md): HiveD's global name, in the pods' one
        r = self.client.get(f"/v1/inspect/affinitygroups/{NAMESPACE}/{group}")
        if r.status_code == 404:
            return "absent"
        assert r.status_code == 200, r.text
        status = r.json()["status"]
        state = status["state"]
        if state in ("Waiting", "Expired"):
            return "absent"
        if state == "Preempting":
            return "preempting"
        if status.get("lazyPreemptionStatus") or status.get("priority", 0) < 0 <= self._asked(group):
            return "downgraded"
        return "allocated"

    def _asked(self, group: str) -> int:
        """The priority the group's pods ask for (a downgraded group runs at -1 below it)."""
        pods = self.cases["pods"]
        return max(int(p[1]) for p in pods.values() if p[6] == group)

    def vc_cells(self, vc: str, chain: str) -> list[tuple[str, str]]:
        """(healthiness, state) of each of the VC's quota cells on `chain`."""
        r = self.client.get(f"/v1/inspect/clusterstatus/virtualclusters/{vc}")
        assert r.status_code == 200, r.text
        return [
            (c["cellHealthiness"], c["cellState"])
            for c in r.json()
            if c.get("cellChain") == chain and c.get("pinnedCellId") is None
        ]

    def reconfigure(self, edits: list[Mapping[str, Any]]) -> None:
        before = self.client.get("/v1/config").json()
        self.config_file.write_text(yaml.safe_dump(edited(design_config(), edits), sort_keys=False))

        def applied() -> bool:
            now = self.client.get("/v1/config").json()
            if now.get("appliedHash") != before.get("appliedHash"):
                return True
            assert now.get("lastResult") not in ("rejected", "unreadable"), now
            if now.get("lastResult") == "refused":  # it downgrades running gangs: confirmed, as an admin does
                Path(now["confirmFile"]).write_text(now["refusedDigest"] + "\n", encoding="utf-8")
            return False

        poll("the reconfiguration to be applied", applied, tries=400, interval=0.05)


@contextmanager
def cluster_for(cases: Mapping[str, Any], edits: list[Mapping[str, Any]], tmp: Path) -> Iterator[Cluster]:
    """A fresh server on HiveD's design config (with HiveD's order, and the scenario's test edits)."""
    config = tmp / "hivedscheduler.yaml"
    config.write_text(yaml.safe_dump(edited(design_config(), edits), sort_keys=False))
    env = {"TOPOGANG_CONFIG_POLL_SECONDS": RELOAD_POLL}
    with (
        running_server(config, env=env, args=("--keep-victims",)) as server,
        server.client(timeout=30.0) as client,
    ):
        yield Cluster(client, cases, config)


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    """`topogang validate` on a file, as a user runs it."""
    return subprocess.run(
        [sys.executable, str(ROOT / "topogang_cli.py"), "validate", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
