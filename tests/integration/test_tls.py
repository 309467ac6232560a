"""TLS serving, and the verbs' door (mutual TLS, then the allowed certificate names), against a real
server: kube-scheduler's certificate answers, another certificate of the same CA gets 403, no
certificate or another CA's never gets past the handshake, and the read listener serves no verb."""

from __future__ import annotations

import shutil
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import running_server
from tests.polling import poll

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="openssl is needed to make certificates"
)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)  # fmt: skip


def make_cert(d: Path, name: str, ca: str, *, server: bool) -> None:
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", cwd=d)  # fmt: skip
    ext = d / f"{name}.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
        if server
        else "extendedKeyUsage=clientAuth\n"
    )
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", ext.name, "-out", f"{name}.crt", cwd=d)  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "rogue-ca")
    make_cert(d, "server", "ca", server=True)
    make_cert(d, "scheduler", "ca", server=False)
    make_cert(d, "system:node:gpu-node-7", "ca", server=False)  # a kubelet's: same CA, not allowed
    make_cert(d, "intruder", "rogue-ca", server=False)
    return d


def client(d: Path, cert: str | None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    if cert is not None:
        ctx.load_cert_chain(str(d / f"{cert}.crt"), str(d / f"{cert}.key"))
    return httpx.Client(verify=ctx, timeout=5.0)


FILTER = {
    "Pod": {"metadata": {"uid": "u1", "name": "p", "namespace": "nlp"}, "spec": {"containers": []}},
    "Nodes": None,
    "NodeNames": ["a100-r1-n1"],
}


def test_only_kube_schedulers_certificate_reaches_the_verbs(certs: Path) -> None:
    args = (
        "--tls-cert", str(certs / "server.crt"), "--tls-key", str(certs / "server.key"),
        "--client-ca", str(certs / "ca.crt"), "--verbs-listen", "127.0.0.1:0",
        "--verbs-allowed-names", "scheduler,topogang-scheduler",
    )  # fmt: skip
    with running_server(args=args) as server:
        banner = "".join(server.log)
        verbs = server.verbs_url
        assert server.url.startswith("https://") and verbs.startswith("https://") and verbs != server.url
        assert "client certificate signed by" in banner and "allowed names: scheduler" in banner
        with client(certs, None) as anon:

            def ready() -> bool:  # readiness over TLS
                try:
                    return bool(anon.get(f"{server.url}/readyz").status_code == 200)
                except httpx.TransportError:
                    return False

            poll("/readyz over TLS", ready, tries=200, interval=0.1)
            assert anon.get(f"{server.url}/healthz").status_code == 200  # read-only: no certificate needed
            # the read listener has no verb at all, nor standalone's state changes
            assert anon.post(f"{server.url}/v1/extender/filter", json=FILTER).status_code == 404
            assert anon.delete(f"{server.url}/v1/standalone/pods/u1").status_code in (404, 405)
            with pytest.raises(httpx.TransportError):  # no certificate: the handshake fails
                anon.post(f"{verbs}/v1/extender/filter", json=FILTER)
        with client(certs, "intruder") as rogue, pytest.raises(httpx.TransportError):
            rogue.post(f"{verbs}/v1/extender/filter", json=FILTER)
        with client(certs, "system:node:gpu-node-7") as kubelet:
            for path, body in (("filter", FILTER), ("bind", {"PodUID": "u1", "Node": "a100-r1-n1"})):
                refused = kubelet.post(f"{verbs}/v1/extender/{path}", json=body)
                assert refused.status_code == 403, refused.text
                assert "system:node:gpu-node-7" in refused.json()["Error"]
            refused = kubelet.put(f"{verbs}/v1/standalone/nodes/a100-r1-n1", json={"ready": False})
            assert refused.status_code == 403
        with client(certs, "scheduler") as sched:
            r = sched.post(f"{verbs}/v1/extender/filter", json=FILTER)
            assert r.status_code == 200 and "NodeNames" in r.json()
            # over one kept-alive connection, request after request
            assert all(
                sched.post(f"{verbs}/v1/extender/filter", json=FILTER).status_code == 200 for _ in "ab"
            )
        server.process.send_signal(signal.SIGTERM)
        # both listeners stop (uvicorn re-raises the signal after its graceful shutdown)
        assert server.process.wait(timeout=15) in (0, -signal.SIGTERM)


def test_bad_tls_flags_are_refused() -> None:
    r = subprocess.run(
        [sys.executable, "-c", "import sys; from topogang_cli import main; sys.exit(main(sys.argv[1:]))",
         "serve", "--tls-cert", "x.crt", "--client-ca", "ca.crt"],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=False,
    )  # fmt: skip
    assert r.returncode == 2
    assert "--tls-cert and --tls-key go together" in r.stderr and "--verbs-allowed-names" in r.stderr


def test_topogang_barrier_checks_the_ledgers_certificate_with_its_ca_file(certs: Path) -> None:
    """The chart serves the ledger over HTTPS: `TOPOGANG_CA_FILE` is what the barrier checks it with;
    without it (the system's trust store) the same server is refused at the handshake."""
    from extender.gangs import barrier

    args = ("--tls-cert", str(certs / "server.crt"), "--tls-key", str(certs / "server.key"))
    with running_server(args=args) as server:
        assert server.url.startswith("https://")
        env = {
            "FC_FRAMEWORK_NAMESPACE": "default",
            "FC_FRAMEWORK_NAME": "nobody",
            "TOPOGANG_LEDGER_URL": server.url,
        }
        trusted = barrier.settings_from_env({**env, "TOPOGANG_CA_FILE": str(certs / "ca.crt")})
        assert trusted.ca_file == certs / "ca.crt"
        assert barrier.ask_ledger(trusted, 0) is None  # answered: an unknown gang is "not yet"
        with pytest.raises(OSError):
            barrier.ask_ledger(barrier.settings_from_env(env), 0)
