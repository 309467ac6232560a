"""Kueue run out of cluster against the e2e control plane (`make bench-peers`; scripts/e2e/README.md).

Kueue is made to run in a cluster: its webhooks are reached through a Service, and its internal
certificate manager writes a Secret and patches its own webhook configurations. Here it is one
process on 127.0.0.1, set up as follows:

- **Its CRDs** come from the Kueue module itself (`config/components/crd/bases` of
  `sigs.k8s.io/kueue@KUEUE_VERSION` in the Go module cache, which `build-bins.sh kueue` fills),
  applied as they are: none of them names a conversion webhook there, so v1beta2 objects need none.
- **TLS for the webhooks**: a CA and a serving certificate for IP 127.0.0.1 made with openssl in the
  work dir; the Configuration turns `internalCertManagement` off and points `webhook.certDir` there
  (`tls.crt`/`tls.key`), with the webhook server on 127.0.0.1 and a free port.
- **The webhook configurations** are Kueue's own (`config/components/webhook/manifests.yaml`),
  those for pods and Kueue's resources only (the other integrations are off), each with
  `clientConfig.url: https://127.0.0.1:PORT/<its path>` and the CA as `caBundle` instead of the
  Service; the pod webhooks skip kube-system and kueue-system, as Kueue's kustomization does. They
  are created once Kueue answers, so no pod is refused while it starts.
- **The metrics certificate**: with internal certificate management off, Kueue v0.19 reads its
  metrics serving certificate from the fixed path `/etc/kueue/metrics/certs` and exits if it is
  not there. It runs in a private mount namespace (`unshare -rm`, which works for root and for
  any user where user namespaces are enabled) where an overlay puts the work dir's copy at that
  path over the machine's /etc, which itself is never written.
- **Otherwise**: leader election off; the visibility API server off (it would bind the fixed
  port 8082); metrics and health on free loopback ports; integrations: `pod` only (the bench's
  jobs are plain pods in pod groups: the e2e control plane runs no kube-controller-manager, so
  batch/v1 Jobs would never make pods). Topology Aware Scheduling is beta and on by default in
  v0.19.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from loadtest.kubeapi import KubeHttp, tls_context
from loadtest.servers import ROOT, Children, free_port

E2E = ROOT / "scripts" / "e2e"
KUEUE_NAMESPACE = "kueue-system"
METRICS_CERT_PATH = "/etc/kueue/metrics/certs"
WEBHOOK_CONFIG = "topogang-bench-kueue"


class KueueError(RuntimeError):
    """Kueue could not be set up (says which step and where its log is)."""


def e2e_setting(name: str) -> str:
    """A value scripts/e2e/versions.sh sets (E2E_BIN, KUEUE_VERSION, ...), as the scripts see it."""
    out = subprocess.run(
        ["bash", "-c", f'. "{E2E / "versions.sh"}" && printf %s "${name}"'],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def kueue_binary() -> Path | None:
    path = Path(e2e_setting("E2E_BIN")) / "kueue"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def kueue_module_dir(version: str) -> Path:
    """The Kueue module's source in the Go module cache, downloaded if it is not there."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    try:
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"sigs.k8s.io/kueue@{version}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=str(Path(e2e_setting("E2E_HOME"))),
            check=False,
        )
    except FileNotFoundError:
        raise KueueError("no Go toolchain to find Kueue's CRDs in the module cache") from None
    try:
        found = Path(json.loads(out.stdout)["Dir"])
    except (ValueError, KeyError):
        raise KueueError(
            f"go mod download sigs.k8s.io/kueue@{version} failed: {out.stderr.strip()[:300]}"
        ) from None
    if not (found / "config" / "components" / "crd" / "bases").is_dir():
        raise KueueError(f"{found} holds no config/components/crd/bases")
    return found


def _openssl(args: list[str], cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=str(cwd), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KueueError(f"openssl {args[0]} failed: {done.stderr.strip()[:300]}")


def make_certs(pki: Path) -> None:
    """A CA and a serving certificate for 127.0.0.1 (tls.crt, tls.key, ca.crt in `pki`)."""
    pki.mkdir(parents=True, exist_ok=True)
    (pki / "server.ext").write_text(
        "basicConstraints = CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl(["genrsa", "-out", "ca.key", "2048"], pki)
    _openssl(
        [
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-days",
            "30",
            "-subj",
            "/CN=kueue-bench-ca",
            "-out",
            "ca.crt",
        ],
        pki,
    )
    _openssl(["genrsa", "-out", "tls.key", "2048"], pki)
    _openssl(["req", "-new", "-key", "tls.key", "-subj", "/CN=127.0.0.1", "-out", "tls.csr"], pki)
    _openssl(
        [
            "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "30", "-extfile", "server.ext", "-out", "tls.crt",
        ],
        pki,
    )  # fmt: skip


def kueue_configuration(pki: Path, webhook_port: int, metrics_port: int, health_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(pki)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 300, "burst": 500},
        # as Kueue's own manifests set them (config/components/manager/controller_manager_config.yaml):
        # without them every controller reconciles one object at a time
        "controller": {
            "groupKindConcurrency": {
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "Cohort.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "integrations": {"frameworks": ["pod"]},
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_configurations(manifests: str, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for pods and its own resources, pointed at `url`."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not isinstance(doc, dict) or not doc.get("kind", "").endswith("WebhookConfiguration"):
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            path = str((hook.get("clientConfig") or {}).get("service", {}).get("path", ""))
            if not (path.endswith("-v1-pod") or "-kueue-x-k8s-io-" in path):
                continue
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
            if path.endswith("-v1-pod"):
                hook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system", KUEUE_NAMESPACE],
                        }
                    ]
                }
            hooks.append(hook)
        doc["metadata"] = {"name": f"{WEBHOOK_CONFIG}-{doc['kind'][:8].lower()}"}
        doc["webhooks"] = hooks
        out.append(doc)
    return out


class KueueProcess:
    """Kueue on the control plane whose `env` (scripts/e2e/cluster-up.sh's WORKDIR/env) is given."""

    def __init__(self, kids: Children, env: Mapping[str, str], workdir: Path, logs: Path) -> None:
        self.kids, self.env, self.workdir, self.logs = kids, env, workdir, logs
        self.version = e2e_setting("KUEUE_VERSION")
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = 0

    def api(self) -> KubeHttp:
        return KubeHttp(int(self.env["API_PORT"]), tls_context(self.env))

    def install_crds(self, module: Path) -> None:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        names = []
        with contextlib.closing(self.api()) as api:
            for f in sorted((module / "config" / "components" / "crd" / "bases").glob("*.yaml")):
                body = yaml.safe_load(f.read_text())
                api.ok("POST", path, body)
                names.append(body["metadata"]["name"])
            deadline = time.monotonic() + 90
            for name in names:
                while True:
                    got = api.ok("GET", f"{path}/{name}")
                    conds = (got.get("status") or {}).get("conditions") or []
                    if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                        break
                    if time.monotonic() > deadline:
                        raise KueueError(f"CRD {name} not established within 90 s")
                    time.sleep(0.3)

    def start(self) -> None:
        binary = kueue_binary()
        if binary is None:
            raise KueueError("no kueue binary: run scripts/e2e/build-bins.sh kueue")
        if shutil.which("unshare") is None:
            raise KueueError("unshare (util-linux) is needed to give Kueue its metrics certificate path")
        module = kueue_module_dir(self.version)
        self.install_crds(module)
        with contextlib.closing(self.api()) as api:
            api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": KUEUE_NAMESPACE}})
        pki = self.workdir / "kueue-pki"
        make_certs(pki)
        overlay = self.workdir / "kueue-etc"
        certs = overlay / METRICS_CERT_PATH.removeprefix("/etc/")
        certs.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(pki / name, certs / name)
        webhook_port, health_port = free_port(), free_port()
        self.metrics_port = free_port()
        config = self.workdir / "kueue-config.yaml"
        config.write_text(
            yaml.safe_dump(
                kueue_configuration(pki, webhook_port, self.metrics_port, health_port), sort_keys=False
            )
        )
        script = 'mount -t overlay overlay -o "lowerdir=$1:/etc" /etc && shift && exec "$@"'
        argv = ["env", f"KUBECONFIG={self.env['KUBECONFIG']}", "unshare", "-rm", "sh", "-c", script]
        argv += ["kueue-ns", str(overlay), str(binary), f"--config={config}", "--zap-log-level=info"]
        self.proc = self.kids.start(argv, self.logs / "kueue.log")
        self._wait_healthy(health_port)
        url = f"https://127.0.0.1:{webhook_port}"
        manifests = (module / "config" / "components" / "webhook" / "manifests.yaml").read_text()
        with contextlib.closing(self.api()) as api:
            for doc in webhook_configurations(manifests, url, (pki / "ca.crt").read_bytes()):
                kind = doc["kind"]
                api.ok("POST", f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s", doc)

    def _wait_healthy(self, port: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise KueueError(f"kueue exited (rc={self.proc.returncode}): see {self.logs / 'kueue.log'}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp,
            ):
                if resp.status == 200:
                    return
            time.sleep(0.5)
        raise KueueError(f"kueue not ready within {timeout:.0f} s: see {self.logs / 'kueue.log'}")
