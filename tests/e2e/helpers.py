"""Helpers for the e2e tests: gang pods as users write them, and polling on real cluster state.

Everything here talks to the API server (pods, nodes, events) or to the extender over HTTP; nothing
reaches into the extender's process.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import urllib3
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

GPU = "nvidia.com/gpu"
ENABLE = "topogang.io/pod-scheduling-enable"
SPEC = "topogang.io/pod-scheduling-spec"
ISOLATION = "topogang.io/pod-leaf-cell-isolation"
BIND_INFO = "topogang.io/pod-bind-info"
VC_LABEL = "topogang.io/virtual-cluster"  # a convention pod's VC (label or annotation)
PROFILE = "topogang"  # spec.schedulerName of the profile in deploy/kube-scheduler-config.yaml

T = TypeVar("T")


# ------------------------------------------------------------------------------------------ polling
def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.2) -> T:
    """Poll `probe` until it returns something other than None or False; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last is not None and last is not False:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


class PodConditions:
    """Every condition the namespace's pods showed, from a watch opened now: a pod deleted a moment
    after its status changed is gone from any later read, but its watch events keep what it said."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.seen: dict[tuple[str, str], dict[str, Any]] = {}  # (pod, condition type) -> the condition
        self.watch = watch.Watch()  # type: ignore[no-untyped-call]
        listed = core.list_namespaced_pod(namespace).metadata
        rv = listed.resource_version if listed is not None else None
        stream = self.watch.stream(  # type: ignore[no-untyped-call]
            core.list_namespaced_pod, namespace, resource_version=rv, timeout_seconds=120
        )
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Iterable[Mapping[str, Any]]) -> None:
        try:
            for event in stream:
                raw = event.get("raw_object") or {}
                name = (raw.get("metadata") or {}).get("name", "")
                for c in (raw.get("status") or {}).get("conditions") or []:
                    self.seen[(name, c.get("type", ""))] = c
        except (ApiException, urllib3.exceptions.HTTPError) as err:  # the connection went with the test
            self.seen[("", "error")] = {"error": str(err)}

    def condition(self, pod: str, kind: str) -> dict[str, Any] | None:
        return self.seen.get((pod, kind))

    def stop(self) -> None:
        self.watch.stop()  # type: ignore[no-untyped-call]


def hold_for(what: str, violation: Callable[[], str | None], seconds: float, interval: float = 0.25) -> int:
    """Check `violation` repeatedly for `seconds`: it must return None every time (else the test fails
    with its message). Returns how many times it was checked."""
    deadline = time.monotonic() + seconds
    checks = 0
    while True:
        bad = violation()
        checks += 1
        if bad is not None:
            pytest.fail(f"{what}: violated after {checks} checks: {bad}")
        if time.monotonic() >= deadline:
            return checks
        time.sleep(interval)


# ------------------------------------------------------------------------------------------ pods
def gang_pod(
    name: str,
    *,
    gang: str,
    vc: str,
    members: Sequence[tuple[int, int]],
    gpus: int,
    priority: int = 0,
    priority_class: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] | None = None,
    spec_extra: Mapping[str, Any] | None = None,
) -> Any:
    """A plain pod of a HiveD-style gang: opt-in limit, `nvidia.com/gpu`, the scheduling-spec annotation
    (with `spec_extra`'s fields added to the spec)."""
    spec = {
        "virtualCluster": vc,
        "priority": priority,
        "leafCellNumber": gpus,
        "affinityGroup": {
            "name": gang,
            "members": [{"podNumber": n, "leafCellNumber": g} for n, g in members],
        },
        **(spec_extra or {}),
    }
    pod_spec: dict[str, Any] = {
        "schedulerName": PROFILE,
        "terminationGracePeriodSeconds": 0,
        # Never pulled: KWOK only fakes the container status.
        "containers": [
            {
                "name": "main",
                "image": "fake.invalid/train:1",
                "resources": {"limits": {ENABLE: "1", GPU: str(gpus)}},
            }
        ],
    }
    if priority_class is not None:
        pod_spec["priorityClassName"] = priority_class
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        pod_spec["tolerations"] = [dict(t) for t in tolerations]
    return client.V1Pod.model_validate(
        {"metadata": {"name": name, "annotations": {SPEC: yaml.safe_dump(spec)}}, "spec": pod_spec}
    )


def gpu_pod(
    name: str,
    gpus: int,
    *,
    labels: Mapping[str, str],
    args: Sequence[str] = (),
    owner: client.V1Pod | None = None,
) -> Any:
    """A GPU pod as another scheduler's convention writes it: topogang's profile and `nvidia.com/gpu`,
    no topogang limit or annotation (the labels make the gang). `owner`: a Spark driver pod."""
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if owner is not None and owner.metadata is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner.metadata.name, "uid": owner.metadata.uid}
        ]
    container: dict[str, Any] = {
        "name": "main",
        "image": "fake.invalid/train:1",
        "resources": {"limits": {GPU: str(gpus)}},
    }
    if args:
        container["args"] = list(args)
    return client.V1Pod.model_validate(
        {
            "metadata": meta,
            "spec": {"schedulerName": PROFILE, "terminationGracePeriodSeconds": 0, "containers": [container]},
        }
    )


def submit_gang(
    core: client.CoreV1Api, namespace: str, prefix: str, pods: int, gpus: int, vc: str, **kw: Any
) -> list[str]:
    """Create `pods` pods of `gpus` GPUs each, one gang named `<namespace>/<prefix>`; their names."""
    names = [f"{prefix}-{i}" for i in range(pods)]
    for n in names:
        core.create_namespaced_pod(
            namespace,
            gang_pod(n, gang=f"{namespace}/{prefix}", vc=vc, members=[(pods, gpus)], gpus=gpus, **kw),
        )
    return names


@dataclass(frozen=True, slots=True)
class Placed:
    namespace: str
    name: str
    node: str | None
    gpus: tuple[int, ...]
    ip: str | None
    phase: str
    annotations: Mapping[str, str]

    @property
    def running(self) -> bool:
        return self.phase == "Running" and bool(self.ip) and self.node is not None


def _placed(pod: client.V1Pod) -> Placed:
    meta = pod.metadata or client.V1ObjectMeta()
    ann = dict(meta.annotations or {})
    text = ann.get(ISOLATION, "")
    gpus = tuple(int(g) for g in text.split(",") if g.strip()) if text else ()
    return Placed(
        str(meta.namespace),
        str(meta.name),
        (pod.spec.node_name if pod.spec else None) or None,
        gpus,
        pod.status.pod_ip if pod.status else None,
        (pod.status.phase if pod.status else None) or "",
        ann,
    )


def object_names(items: Iterable[Any]) -> list[str]:
    """metadata.name of each API object (pods, nodes, ...)."""
    return [str(o.metadata.name) for o in items if o.metadata is not None and o.metadata.name]


def pods_of(core: client.CoreV1Api, namespace: str, names: Iterable[str] | None = None) -> dict[str, Placed]:
    """The live (not terminating) pods of a namespace, or just `names` among them."""
    wanted = set(names) if names is not None else None
    out: dict[str, Placed] = {}
    for pod in core.list_namespaced_pod(namespace).items:
        p = _placed(pod)
        if pod.metadata is None or pod.metadata.deletion_timestamp is not None:
            continue
        if wanted is None or p.name in wanted:
            out[p.name] = p
    return out


def bound(core: client.CoreV1Api, namespace: str, names: Iterable[str]) -> list[str]:
    """Which of `names` have a node."""
    return sorted(n for n, p in pods_of(core, namespace, names).items() if p.node is not None)


def wait_running(
    core: client.CoreV1Api, namespace: str, names: Sequence[str], timeout: float = 60.0
) -> dict[str, Placed]:
    """Every pod of `names` bound, Running, with a pod IP."""

    def probe() -> dict[str, Placed] | None:
        got = pods_of(core, namespace, names)
        if len(got) == len(names) and all(p.running for p in got.values()):
            return got
        return None

    def state() -> str:
        got = pods_of(core, namespace, names)
        return ", ".join(f"{n}: {p.phase} on {p.node} ip={p.ip}" for n, p in sorted(got.items()))

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = probe()
        if done is not None:
            return done
        time.sleep(0.2)
    events = pod_events(core, namespace)
    pytest.fail(
        f"timed out after {timeout:.0f}s waiting for {list(names)} to run: {state()}\n"
        f"events:\n" + "\n".join(events[-15:])
    )


def wait_gone(core: client.CoreV1Api, namespace: str, names: Iterable[str], timeout: float = 60.0) -> None:
    names = list(names)

    def gone() -> bool:
        left = set(object_names(core.list_namespaced_pod(namespace).items))
        return not (left & set(names))

    wait_until(f"pods {names} deleted", gone, timeout)


def delete_pods(core: client.CoreV1Api, namespace: str, names: Iterable[str]) -> list[str]:
    names = list(names)
    for n in names:
        try:
            core.delete_namespaced_pod(n, namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return names


def pod_events(core: client.CoreV1Api, namespace: str, pod: str | None = None) -> list[str]:
    """`pod: reason: message` of the namespace's events (of one pod), oldest first."""
    out = []
    for ev in core.list_namespaced_event(namespace).items:
        obj = ev.involved_object
        if obj is None or (pod is not None and obj.name != pod):
            continue
        out.append(f"{obj.name}: {ev.reason}: {ev.message}")
    return out


def gpu_collisions(core: client.CoreV1Api) -> dict[tuple[str, int], list[str]]:
    """(node, GPU index) held by more than one live bound pod, across every namespace."""
    holders: dict[tuple[str, int], list[str]] = {}
    for pod in core.list_pod_for_all_namespaces().items:
        p = _placed(pod)
        if p.node is None or p.phase in ("Succeeded", "Failed"):
            continue
        for g in p.gpus:
            holders.setdefault((p.node, g), []).append(f"{p.namespace}/{p.name}")
    return {k: v for k, v in sorted(holders.items()) if len(v) > 1}


# ------------------------------------------------------------------------------------------ assertions
def assert_whole_gang(pods: dict[str, Placed], gpus: int) -> None:
    """Every member on a node with `gpus` distinct GPU indices; no (node, GPU) twice in the gang."""
    seen: dict[tuple[str, int], str] = {}
    for name, p in sorted(pods.items()):
        assert p.node is not None and p.running, f"{name}: {p}"
        assert len(p.gpus) == gpus == len(set(p.gpus)), f"{name}: GPU indices {p.gpus}"
        assert all(0 <= g < 8 for g in p.gpus), f"{name}: GPU indices {p.gpus}"
        assert BIND_INFO in p.annotations, f"{name}: no bind info"
        for g in p.gpus:
            assert (p.node, g) not in seen, f"{name} and {seen[(p.node, g)]} share GPU {g} of {p.node}"
            seen[(p.node, g)] = name


def gang_of(p: Placed) -> str:
    """The gang a bound pod belongs to, from the bind info the extender wrote on it (only the
    extender's bind writes it)."""
    info = yaml.safe_load(p.annotations[BIND_INFO])
    return str(info["gang"])


def seen_by_scheduler(core: client.CoreV1Api, ns: str, pod: str) -> str | None:
    """The first scheduling event of a pod (kube-scheduler's FailedScheduling or topogang's GangWaiting):
    proof that its gang went through filter at least once."""
    for line in pod_events(core, ns, pod):
        if ": FailedScheduling:" in line or ": GangWaiting:" in line:
            return line
    return None


def none_bound(core: client.CoreV1Api, ns: str, names: list[str]) -> str | None:
    got = bound(core, ns, names)
    return f"{len(got)} of {len(names)} members bound: {got}" if got else None


# ------------------------------------------------------------------------------------------ topology
def racks(topology: str | Path) -> dict[str, str]:
    """Node name -> rack (the index of its top-level physical cell), read from the config itself."""
    doc = yaml.safe_load(Path(topology).read_text(encoding="utf-8"))
    out: dict[str, str] = {}

    def walk(cell: Mapping[str, Any], rack: str) -> None:
        address = cell.get("cellAddress")
        children = cell.get("cellChildren") or []
        if address is not None and not children:
            out[str(address)] = rack
        for child in children:
            walk(child, rack)

    for i, top in enumerate(doc["physicalCluster"]["physicalCells"]):
        for child in top.get("cellChildren") or []:
            walk(child, str(i))
    return out


# ------------------------------------------------------------------------------------------ extender
def free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_TRUST: list[ssl.SSLContext] = []  # the chart's CA, once an extender with HTTPS reads started


def trust(ca: Path) -> ssl.SSLContext:
    """Check https:// URLs against `ca` from now on (the chart's CA: the read listener's certificate
    names 127.0.0.1, so the host name is checked too); the context, for callers of their own."""
    ctx = ssl.create_default_context(cafile=str(ca))
    _TRUST[:] = [ctx]
    return ctx


def tls_for(url: str) -> ssl.SSLContext | None:
    """The context an https:// URL is opened with (None: plain HTTP, or the system's trust)."""
    return _TRUST[0] if url.startswith("https:") and _TRUST else None


def http_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout, context=tls_for(url)) as resp:
        return json.loads(resp.read())


def http_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout, context=tls_for(url)) as resp:
        return str(resp.read().decode("utf-8", errors="replace"))


def http_status(url: str, timeout: float = 5.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=tls_for(url)) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return None
