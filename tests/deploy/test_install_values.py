"""The chart's values the docs offer render an install that works, and what the docs promise about
the bind signing key holds for the default install."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli import _parser as serve_parser
from extender.http.tls import TlsSettings
from scripts import manifests

EXAMPLE = manifests.REPO / "config" / "examples" / "example-cluster.yaml"
KEEP = "helm.sh/resource-policy"


def render(helm: Path, *values: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifests.template(helm, *values)) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_verbs_without_mtls_speak_the_scheme_kube_scheduler_calls(helm: Path) -> None:
    """values.yaml: `extender.verbs.mtls.enabled: false` is "plain HTTP". kube-scheduler is then
    pointed at http://...:9443 (enableHTTPS false), but with the read port's TLS on (the default) the
    extender's verbs listener falls back to the read certificate and serves HTTPS there
    (`TlsSettings.verbs_enabled`): every filter/bind call fails and no pod of the profile schedules.
    The chart must either render a matching pair or refuse the values."""
    try:
        docs = render(helm, "--set-file", f"config={EXAMPLE}", "--set", "extender.verbs.mtls.enabled=false")
    except manifests.HelmError as err:  # a clean refusal naming the value is a fix too
        assert "mtls" in str(err)
        return
    ext = one(docs, "Deployment", "topogang-extender")
    (c,) = ext["spec"]["template"]["spec"]["containers"]
    args = serve_parser().parse_args(c["args"])
    tls = TlsSettings(args.tls_cert, args.tls_key, args.client_ca, args.verbs_tls_cert, args.verbs_tls_key)
    cfg = yaml.safe_load(
        one(docs, "ConfigMap", "topogang-scheduler-config")["data"]["kube-scheduler-config.yaml"]
    )
    (call,) = cfg["extenders"]
    scheduler_https = call["urlPrefix"].startswith("https://")
    # what `topogang serve` hands uvicorn for the verbs listener (extender.cli.run)
    verbs_https = "ssl_certfile" in tls.uvicorn_options(verbs=True)
    assert verbs_https == tls.verbs_enabled
    assert scheduler_https == verbs_https, (
        f"kube-scheduler calls {call['urlPrefix']} (enableHTTPS {call.get('enableHTTPS')}) but the "
        f"extender's verbs listener serves {'HTTPS' if verbs_https else 'plain HTTP'}"
    )


def test_the_kept_signing_key_survives_an_uninstall(helm: Path) -> None:
    """values.yaml and the Secret's own comment: the bind signing key is "kept ... past an uninstall"
    (helm.sh/resource-policy: keep) "so the bind info of pods bound before stays adoptable". With the
    defaults the chart also creates the Namespace that Secret lives in (createNamespace: true), without
    keep: `helm uninstall` deletes that Namespace and the API server deletes the kept Secret with it.
    A reinstall then makes a new random key and every running pod's bind info is unverified (its gang
    loses its VC quota and priority)."""
    docs = render(helm, "--set-file", f"config={EXAMPLE}")
    secret = one(docs, "Secret", "topogang-bind-signing-key")
    assert (secret["metadata"].get("annotations") or {}).get(KEEP) == "keep"
    ns = secret["metadata"]["namespace"]
    owned = [d for d in docs if d["kind"] == "Namespace" and d["metadata"]["name"] == ns]
    for namespace in owned:
        assert (namespace["metadata"].get("annotations") or {}).get(KEEP) == "keep", (
            f"the kept Secret {ns}/topogang-bind-signing-key lives in the Namespace {ns} the release "
            "itself creates and deletes on uninstall: the key does not survive it"
        )


@pytest.mark.parametrize("port", ["extender.port", "extender.verbs.port"])
def test_an_admin_port_that_is_another_listeners_is_refused(helm: Path, port: str) -> None:
    """An admin listener on the read or the verbs port could not listen: the extender would not
    start. The chart refuses the values, naming the one to change."""
    with pytest.raises(manifests.HelmError, match="adminPort"):
        render(helm, "--set-file", f"config={EXAMPLE}", "--set", f"{port}=9097")
    assert render(helm, "--set-file", f"config={EXAMPLE}", "--set", "extender.readers.adminPort=0")
