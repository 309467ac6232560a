"""The control plane `loadtest.bench_kube` runs on: `scripts/e2e/cluster-up.sh` in a work dir, the
GangReservation CRD as deployed, the extender in Kubernetes mode, and a second kube-scheduler from the
same config with the extender taken out (the stock profile to compare with)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from loadtest.kubeapi import KubeHttp, scheduler_context, tls_context
from loadtest.servers import ROOT, Children, free_port, wait_ready

E2E = ROOT / "scripts" / "e2e"


# the resources of deploy/admission-gate.yaml's kinds
_PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}


class ControlPlane:
    """`scripts/e2e/cluster-up.sh` in a work dir (down again on `close`), the extender in Kubernetes
    mode, and the second kube-scheduler without it."""

    def __init__(self, kids: Children, workdir: Path, topology: Path, logs: Path) -> None:
        self.kids, self.workdir, self.topology, self.logs = kids, workdir, topology, logs
        self.env: dict[str, str] = {}

    def up(self) -> None:
        env = {**os.environ, "TOPOGANG_E2E_TOPOLOGY": str(self.topology), "TOPOGANG_PYTHON": sys.executable}
        env["TOPOGANG_E2E_OWNER_PID"] = str(os.getpid())
        with (self.logs / "cluster-up.log").open("wb") as log:
            rc = subprocess.call(
                ["bash", str(E2E / "cluster-up.sh"), str(self.workdir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        if rc != 0:
            raise RuntimeError(f"cluster-up.sh failed (rc={rc}): see {self.logs / 'cluster-up.log'}")
        for line in (self.workdir / "env").read_text().splitlines():
            key, _, value = line.partition("=")
            self.env[key] = value

    def namespaces(self, names: Sequence[str]) -> None:
        with contextlib.closing(KubeHttp(int(self.env["API_PORT"]), tls_context(self.env))) as api:
            for ns in names:
                api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})

    def reservation_crd(self) -> None:
        """The GangReservation CRD as deployed (`deploy/gangreservation-crd.yaml`), established: the
        extender then writes its reservations as it does in production."""
        body = yaml.safe_load((ROOT / "deploy" / "gangreservation-crd.yaml").read_text())
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        with contextlib.closing(KubeHttp(int(self.env["API_PORT"]), tls_context(self.env))) as api:
            api.ok("POST", path, body)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                got = api.ok("GET", f"{path}/{body['metadata']['name']}")
                conditions = (got.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                    return
                time.sleep(0.3)
        raise RuntimeError("the GangReservation CRD was not established within 60 s")

    def admission_gate(self) -> None:
        """The admission gate as deployed (`deploy/admission-gate.yaml`): every pod of topogang's
        profile created behind `topogang.io/admission`, which the extender's leader lifts."""
        base = "/apis/admissionregistration.k8s.io/v1"
        docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "admission-gate.yaml").read_text()) if d]
        with contextlib.closing(KubeHttp(int(self.env["API_PORT"]), tls_context(self.env))) as api:
            for doc in docs:
                api.ok("POST", f"{base}/{_PLURALS[doc['kind']]}", doc)

    def extender(self, config: Path, *extra: str) -> subprocess.Popen[bytes]:
        """The extender, its verbs where kube-scheduler calls them (EXTENDER_PORT) and its reads on
        `read_port`."""
        verbs = int(self.env["EXTENDER_PORT"])
        self.read_port = free_port()
        argv = [sys.executable, "-m", "topogang_cli", "serve", "--kubeconfig", self.env["KUBECONFIG"]]
        argv += ["--config", str(config), "--listen", f"127.0.0.1:{self.read_port}"]
        argv += ["--verbs-listen", f"127.0.0.1:{verbs}", "--log-level", "warning", *extra]
        p = self.kids.start(argv, self.logs / f"extender{'-dra' if extra else ''}.log")
        wait_ready(self.read_port, p, 120.0)
        return p

    def stock_scheduler(self) -> tuple[subprocess.Popen[bytes], int]:
        """kube-scheduler from the same config with the extender taken out and the profile renamed."""
        cfg = yaml.safe_load((self.workdir / "scheduler.yaml").read_text())
        cfg.pop("extenders", None)
        cfg["leaderElection"] = {"leaderElect": False}
        for profile in cfg.get("profiles") or [{}]:
            profile["schedulerName"] = "stock"
        path = self.workdir / "scheduler-stock.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return self.scheduler(path, "stock")

    def scheduler(self, config: Path, name: str) -> tuple[subprocess.Popen[bytes], int]:
        """One more kube-scheduler on `config`, ready; it and its port."""
        port = free_port()
        binary = str(Path(self.env["E2E_BIN"]) / "kube-scheduler")
        kubeconfig = self.env["KUBECONFIG"]
        argv = [binary, f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}"]
        argv += [
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--v=1",
        ]
        log = self.logs / f"kube-scheduler-{name}.log"
        p = self.kids.start(argv, log)
        ctx = scheduler_context(self.env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError, RuntimeError),
                contextlib.closing(KubeHttp(port, ctx, 2.0)) as api,
            ):
                if api.text("/readyz").strip() == "ok":
                    return p, port
            if p.poll() is not None:
                break
            time.sleep(0.3)
        raise RuntimeError(f"the {name} kube-scheduler did not get ready: see {log}")

    def close(self) -> None:
        if (self.workdir / "run").is_dir():
            with (self.logs / "cluster-down.log").open("wb") as log:
                subprocess.call(
                    ["bash", str(E2E / "cluster-down.sh"), str(self.workdir)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        for f in (self.workdir / "logs").glob("*.log") if (self.workdir / "logs").is_dir() else ():
            shutil.copy(f, self.logs / f"cp-{f.name}")
