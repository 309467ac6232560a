"""TLS serving and client-certificate verification of the verbs, against a real server."""

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


def test_only_certified_clients_reach_the_verbs(certs: Path) -> None:
    args = (
        "--tls-cert", str(certs / "server.crt"), "--tls-key", str(certs / "server.key"),
        "--client-ca", str(certs / "ca.crt"), "--verbs-listen", "127.0.0.1:0",
    )  # fmt: skip
    with running_server(args=args) as server:
        banner = "".join(server.log)
        verbs = banner.split("urlPrefix ", 1)[1].split("/v1/extender", 1)[0]
        assert server.url.startswith("https://") and "client certificate required" in banner
        with client(certs, None) as anon:

            def ready() -> bool:  # readiness over TLS
                try:
                    return bool(anon.get(f"{server.url}/readyz").status_code == 200)
                except httpx.TransportError:
                    return False

            poll("/readyz over TLS", ready, tries=200, interval=0.1)
            assert anon.get(f"{server.url}/healthz").status_code == 200  # read-only: no certificate needed
            refused = anon.post(f"{server.url}/v1/extender/filter", json=FILTER)
            assert refused.status_code == 403 and "client-certificate" in refused.json()["Error"]
            with pytest.raises(httpx.TransportError):
                anon.post(f"{verbs}/v1/extender/filter", json=FILTER)
        with client(certs, "intruder") as rogue, pytest.raises(httpx.TransportError):
            rogue.post(f"{verbs}/v1/extender/filter", json=FILTER)
        with client(certs, "scheduler") as sched:
            r = sched.post(f"{verbs}/v1/extender/filter", json=FILTER)
            assert r.status_code == 200 and "NodeNames" in r.json()
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
    assert "--tls-cert and --tls-key go together" in r.stderr and "--verbs-listen" in r.stderr
