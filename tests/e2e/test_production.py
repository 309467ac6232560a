"""Production readiness end to end: two extender replicas with leader election behind a stand-in for
their Service, durable GangReservations, and hot reload of the config file, all under the real
kube-scheduler.

The Service is emulated by `ReadyProxy` on the port kube-scheduler calls: like kube-proxy with
endpoints from readiness probes, it sends each new connection to the verbs port of a replica whose
/readyz answers 200 (the replicas' verbs' door is the chart's: mutual TLS, passed through untouched).
Replicas are killed with SIGKILL (no clean hand-over), so a fail-over waits for the Lease to lapse.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import threading
import time
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from config.against import CONFIRM_FILE, config_digest
from config.load import load_config_text
from tests.e2e.conftest import (
    REPO,
    E2ECluster,
    Extender,
    Process,
    extender_command,
    free_port,
    ignore_conflict,
    priority_classes,
    service_account_kubeconfig,
)
from tests.e2e.helpers import (
    BIND_INFO,
    delete_pods,
    gang_pod,
    gpu_collisions,
    http_json,
    http_status,
    object_names,
    pods_of,
    racks,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

NS = "topogang-system"
LEASE_SECONDS = 3
LOW, HIGH = "e2e-topogang-low", "e2e-topogang-high"
HOLD = "e2e.topogang.io/hold"  # a finalizer: a victim stays (terminating) until the test lets it go


class ReadyProxy:
    """A TCP forwarder standing in for the extender's Service: each connection goes to a ready replica."""

    def __init__(self, port: int, backends: list[tuple[int, int]]) -> None:
        """`backends`: (read port, verbs port) of each replica."""
        self.backends = backends
        self.ready: int | None = None
        self.stopped = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.sock.settimeout(0.2)
        self.threads = [
            threading.Thread(target=self._probe, daemon=True),
            threading.Thread(target=self._accept, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _probe(self) -> None:
        while not self.stopped.is_set():
            self.ready = next(
                (
                    v
                    for p, v in self.backends
                    if http_status(f"http://127.0.0.1:{p}/readyz", timeout=0.5) == 200
                ),
                None,
            )
            time.sleep(0.1)

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            port = self.ready
            if port is None:
                conn.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            src.settimeout(None)
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


class Replica:
    def __init__(self, cluster: E2ECluster, name: str, config: Path, door: list[str]) -> None:
        self.cluster, self.name, self.config = cluster, name, config
        self.port = free_port()
        self.verbs_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # the chart's verbs' door (mutual TLS, kube-scheduler's name), on this replica's own verbs port
        self.door = list(door)
        self.door[self.door.index("--verbs-listen") + 1] = f"127.0.0.1:{self.verbs_port}"
        self.admin_port = free_port()  # the admin listener: the cluster-wide views without a token
        self.runs = 0
        self.process: Process | None = None

    def start(self) -> None:
        self.runs += 1
        argv = [
            *extender_command(),
            "serve",
            "--kubeconfig",  # as its ServiceAccount: the Lease and the reservations under deploy/rbac.yaml
            str(service_account_kubeconfig(self.cluster)),
            "--config",
            str(self.config),
            "--listen",
            f"127.0.0.1:{self.port}",
            "--admin-listen",
            f"127.0.0.1:{self.admin_port}",
            "--namespace",
            NS,
            "--leader-elect",
            "--lease-seconds",
            str(LEASE_SECONDS),
            "--renew-deadline",
            "2",
            "--retry-seconds",
            "0.5",
            *self.door,
        ]
        env = {**os.environ, "POD_NAME": self.name, "TOPOGANG_CONFIG_POLL_SECONDS": "0.5"}
        log = self.cluster.workdir / "logs" / f"replica-{self.name}-{self.runs}.log"
        self.process = Process(f"replica-{self.name}", argv, log, cwd=REPO, env=env)
        wait_until(f"replica {self.name} to answer", lambda: http_status(f"{self.url}/healthz", 1) == 200, 60)

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def ready(self) -> bool:
        return http_status(f"{self.url}/readyz", 1) == 200

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.proc.wait(10)
        self.process.stop()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def get(self, path: str) -> Any:
        return http_json(f"http://127.0.0.1:{self.admin_port}{path}")

    def log(self) -> str:
        return self.process.log() if self.process is not None else ""


class Pair:
    def __init__(self, replicas: list[Replica], config: Path) -> None:
        self.replicas = replicas
        self.config = config

    def leader(self, timeout: float = 30) -> Replica:
        return wait_until(
            "a leading replica",
            lambda: next((r for r in self.replicas if r.alive() and r.ready()), None),
            timeout,
        )

    def standby(self) -> Replica:
        lead = self.leader()
        return next(r for r in self.replicas if r is not lead)


def install_crd(cluster: E2ECluster) -> None:
    ext = client.ApiextensionsV1Api(cluster.api)
    body = yaml.safe_load((REPO / "deploy" / "gangreservation-crd.yaml").read_text(encoding="utf-8"))
    ignore_conflict(ext.create_custom_resource_definition, body)

    def established() -> bool:
        crd: Any = ext.read_custom_resource_definition(body["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    wait_until("the GangReservation CRD established", established, 30)
    ignore_conflict(
        cluster.core.create_namespace, client.V1Namespace.model_validate({"metadata": {"name": NS}})
    )


@pytest.fixture(scope="module")
def pair(
    e2e_cluster: E2ECluster, extender_session: Extender, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    """Two replicas instead of the session's single extender (put back afterwards)."""
    extender_session.stop()
    install_crd(e2e_cluster)
    config = tmp_path_factory.mktemp("ha") / "cluster.yaml"
    shutil.copy(e2e_cluster.env["TOPOLOGY"], config)
    replicas = [Replica(e2e_cluster, n, config, extender_session.door) for n in ("a", "b")]
    proxy = ReadyProxy(int(e2e_cluster.env["EXTENDER_PORT"]), [(r.port, r.verbs_port) for r in replicas])
    try:
        for r in replicas:
            r.start()
        yield Pair(replicas, config)
    finally:
        for r in replicas:
            r.stop()
        proxy.close()
        extender_session.start()


@pytest.fixture
def ns(e2e_cluster: E2ECluster, pair: Pair) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core = e2e_cluster.core
    core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": name}}))
    yield name
    pods: list[Any] = core.list_namespaced_pod(name).items
    for p in pods:
        if p.metadata.finalizers:
            core.patch_namespaced_pod(p.metadata.name, name, {"metadata": {"finalizers": None}})
    names = [str(p.metadata.name) for p in pods]
    delete_pods(core, name, names)
    wait_gone(core, name, names, 60)
    for r in pair.replicas:  # the next test starts from two running replicas
        if not r.alive():
            r.start()
    lead = pair.leader()
    wait_until(
        "the leader to hold nothing",
        lambda: lead.get("/v1/inspect")["gpus"]["free"] == lead.get("/v1/inspect")["gpus"]["total"],
        30,
    )


def http_json_error(url: str) -> Any:
    """The JSON body of an error answer (readyz says why it is not ready)."""
    try:
        return http_json(url)
    except urllib.error.HTTPError as err:
        return json.loads(err.read())


def nlp_quota(r: Replica) -> int:
    return int(r.get("/v1/inspect")["virtualClusters"]["nlp"]["quota"])


def create(core: client.CoreV1Api, ns: str, name: str, gang: str, pods: int, vc: str, **kw: Any) -> None:
    body = gang_pod(name, gang=f"{ns}/{gang}", vc=vc, members=[(pods, 8)], gpus=8, **kw)
    core.create_namespaced_pod(ns, body)


def recorded_placement(pod: Any) -> list[tuple[str, tuple[int, ...]]]:
    doc = yaml.safe_load(pod.annotations[BIND_INFO])
    return sorted(
        (str(p["physicalNode"]), tuple(int(x) for x in p["physicalLeafCellIndices"]))
        for group in doc["affinityGroupBindInfo"]
        for p in group["podPlacements"]
    )


# ------------------------------------------------------------------------------------------ fail-over
def test_leader_killed_mid_gang_the_standby_completes_it(
    e2e_cluster: E2ECluster, pair: Pair, ns: str
) -> None:
    core = e2e_cluster.core
    lead = pair.leader()
    standby = pair.standby()
    wait_until(  # synced, warm, and not serving
        "the other replica to be a standby",
        lambda: "standby: the Lease is held by" in http_json_error(f"{standby.url}/readyz")["reason"],
        30,
    )
    assert http_status(f"{standby.url}/readyz") == 503
    for i in range(2):  # two of three members: the third arrives after the fail-over
        create(core, ns, f"w-{i}", "w", 3, "vision")
    first = wait_running(core, ns, ["w-0", "w-1"])
    planned = recorded_placement(first["w-0"])
    assert len(planned) == 3

    lead.kill()
    t0 = time.monotonic()
    new = wait_until("the standby to lead", lambda: standby if standby.ready() else None, 30)
    took = time.monotonic() - t0
    assert took < 4 * LEASE_SECONDS, f"fail-over took {took:.1f}s"
    assert "leading: acquired Lease" in new.log()

    create(core, ns, "w-2", "w", 3, "vision")
    pods = wait_running(core, ns, ["w-0", "w-1", "w-2"])
    got = sorted((str(p.node), tuple(sorted(p.gpus))) for p in pods.values())
    assert got == planned, "the third member must take the slot reserved before the fail-over"
    assert len({racks(e2e_cluster.env["TOPOLOGY"])[n] for n, _ in got}) == 1
    assert not gpu_collisions(core)
    print(f"fail-over in {took:.1f}s (lease {LEASE_SECONDS}s)")


def test_a_pending_preemption_survives_the_leader_dying(e2e_cluster: E2ECluster, pair: Pair, ns: str) -> None:
    """nlp is full with a priority-10 gang whose pods hold a finalizer, so once evicted they stay
    Terminating; a priority-100 gang preempts them and holds its cells as a GangReservation. The
    leader dies; the new one must restore that reservation (not place the gang elsewhere or twice),
    and the gang binds there once the victims are gone."""
    core = e2e_cluster.core
    priority_classes(e2e_cluster, {LOW: 10, HIGH: 100})
    custom = client.CustomObjectsApi(e2e_cluster.api)
    lead = pair.leader()
    for i in range(3):
        body = gang_pod(
            f"low-{i}", gang=f"{ns}/low", vc="nlp", members=[(3, 8)], gpus=8, priority=10, priority_class=LOW
        )
        body.metadata.finalizers = [HOLD]
        core.create_namespaced_pod(ns, body)
    wait_running(core, ns, [f"low-{i}" for i in range(3)])
    for i in range(2):
        create(core, ns, f"high-{i}", "high", 2, "nlp", priority=100, priority_class=HIGH)

    gang = f"{ns}/high"

    def reservation() -> dict[str, Any] | None:
        got: Any = custom.list_namespaced_custom_object("topogang.io", "v1alpha1", NS, "gangreservations")
        items: list[dict[str, Any]] = got["items"]
        return next((o for o in items if o["spec"]["gang"] == gang), None)

    obj = wait_until("the preemptor's GangReservation", reservation, 60)
    assert obj["status"]["phase"] == "Preempting", obj
    wait_until(
        "the victims to be evicted (Terminating)",
        lambda: not [n for n in pods_of(core, ns) if n.startswith("low")],  # live pods only
        30,
    )
    assert len(object_names(core.list_namespaced_pod(ns).items)) == 5, "the victims stay, Terminating"
    reserved = sorted((s["node"], tuple(s["gpus"])) for s in obj["spec"]["slots"])
    before = lead.get(f"/v1/inspect/affinitygroups/{gang}")

    lead.kill()
    new = pair.leader(30)
    assert new is not lead
    assert "restored 1 of 1 persisted gang reservations" in new.log() or "restored 1 of" in new.log(), (
        new.log()[-2000:]
    )
    after = new.get(f"/v1/inspect/affinitygroups/{gang}")
    assert after["status"]["phase"] == before["status"]["phase"] == "Preempting", (before, after)
    assert after["status"]["physicalPlacement"] == before["status"]["physicalPlacement"]
    assert [p for p in pods_of(core, ns, ["high-0", "high-1"]).values() if p.node] == []

    for i in range(3):  # the victims may go now
        core.patch_namespaced_pod(f"low-{i}", ns, {"metadata": {"finalizers": None}})
    pods = wait_running(core, ns, ["high-0", "high-1"], timeout=90)
    got = sorted((str(p.node), tuple(sorted(p.gpus))) for p in pods.values())
    assert got == reserved, "the gang must bind on the reservation made before the leader died"
    assert not gpu_collisions(core)
    wait_until("the reservation object deleted", lambda: reservation() is None, 30)
    lead.start()  # back as a standby
    assert not lead.ready()


# ------------------------------------------------------------------------------------------ hot reload
def test_config_edits_apply_live_and_bad_ones_are_rejected(
    e2e_cluster: E2ECluster, pair: Pair, ns: str
) -> None:
    core = e2e_cluster.core
    lead = pair.leader()
    pid = lead.process.pid if lead.process else None
    create(core, ns, "a-0", "a", 2, "nlp")
    create(core, ns, "a-1", "a", 2, "nlp")
    running = wait_running(core, ns, ["a-0", "a-1"])
    original = pair.config.read_text(encoding="utf-8")
    try:
        # a VC grows (nlp: 3 -> 4 nodes): applied without a restart, the running gang untouched
        grown = original.replace(
            "cellType: A100-RACK.A100-NODE\n      cellNumber: 3",
            "cellType: A100-RACK.A100-NODE\n      cellNumber: 4",
        )
        assert grown != original
        tmp = pair.config.with_suffix(".new")
        tmp.write_text(grown, encoding="utf-8")
        tmp.replace(pair.config)
        wait_until(
            "nlp's quota to grow to 32 GPUs",
            lambda: lead.get("/v1/inspect")["virtualClusters"]["nlp"]["quota"] == 32,
            30,
        )
        assert lead.get("/v1/config")["lastResult"] == "applied"
        # 2 more nodes for nlp: only possible with the new quota
        create(core, ns, "b-0", "b", 2, "nlp")
        create(core, ns, "b-1", "b", 2, "nlp")
        wait_running(core, ns, ["b-0", "b-1"])
        now = pods_of(core, ns, ["a-0", "a-1"])
        assert {n: (p.node, p.gpus) for n, p in now.items()} == {
            n: (p.node, p.gpus) for n, p in running.items()
        }

        # an invalid edit: rejected with its reason, nothing changes
        bad = grown.replace(
            "cellType: A100-RACK.A100-NODE\n      cellNumber: 4",
            "cellType: A100-RACK.A100-NODE\n      cellNumber: 9",
        )
        tmp.write_text(bad, encoding="utf-8")
        tmp.replace(pair.config)
        status = wait_until(
            "the bad config rejected",
            lambda: (s := lead.get("/v1/config")) and (s if s["lastResult"] == "rejected" else None),
            30,
        )
        assert any("nlp" in e for e in status["lastErrors"]), status
        assert lead.get("/v1/inspect")["virtualClusters"]["nlp"]["quota"] == 32
        assert lead.process is not None and lead.process.pid == pid and lead.alive()

        # the typo that once halved the cluster, and a dedented key: each refused, naming path and fix
        for what, edit, says in [
            (
                "a typo",
                ("childCellType: A100-SWITCH", "childCellType: A100-SWTICH"),
                "did you mean 'A100-SWITCH'",
            ),
            ("a dedent", ("      isNodeLevel: true", "    isNodeLevel: true"), "indent it to column 7"),
        ]:
            broken = grown.replace(*edit, 1)
            assert broken != grown, what
            tmp.write_text(broken, encoding="utf-8")
            tmp.replace(pair.config)
            status = wait_until(
                f"the config with {what} rejected",
                lambda says=says: (
                    (s := lead.get("/v1/config"))  # type: ignore[misc]
                    and (
                        s
                        if s["lastResult"] == "rejected" and any(says in e for e in s["lastErrors"])
                        else None
                    )
                ),
                30,
            )
            assert lead.get("/v1/inspect")["virtualClusters"]["nlp"]["quota"] == 32, what
            assert lead.process is not None and lead.process.pid == pid and lead.alive()

        def rejected_event() -> str | None:
            for e in core.list_namespaced_event(NS).items:
                if e.reason == "ConfigRejected":
                    return str(e.message)
            return None

        message = wait_until("a ConfigRejected event", rejected_event, 30)
        assert "the running one stays in force" in message
    finally:
        # nlp shrinks back below what its two gangs run: a reload refuses that unless it is confirmed
        confirm = pair.config.parent / CONFIRM_FILE
        confirm.write_text(config_digest(load_config_text(original)), encoding="utf-8")
        pair.config.write_text(original, encoding="utf-8")
        for r in [r for r in pair.replicas if r.alive()]:
            wait_until(f"{r.name} back on the original config", lambda r=r: nlp_quota(r) == 24, 30)  # type: ignore[misc]
        confirm.unlink()
