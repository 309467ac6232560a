"""What the admin's commands read from a running system: the extender's admin routes for `topogang diff
--against`, and the API server's nodes for `topogang generate --from-cluster` (through the client the
extender itself uses, `load_api_client`).

The reads an admin makes (`/v1/config`, `/v1/inspect/affinitygroups`) are behind the admin door
(`extender/http/doors.py`): reached through the admin listener (`kubectl port-forward`, no token
needed) or the reads' listener with a bearer token whose caller RBAC lets `get clusterstatus`.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

TIMEOUT_SECONDS = 30.0


def admin_get(base: str, path: str, token: str | None = None, cacert: str | None = None) -> Any:
    """GET `base + path` as JSON; raise OSError (no answer, or not 200) or ValueError (not JSON)."""
    url = base.rstrip("/") + path
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{base}: the URL must start with http:// or https://")
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=cacert) if url.startswith("https://") else None
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_SECONDS, context=context) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace").strip()
        raise OSError(f"GET {path}: HTTP {exc.code} {detail}") from None
    except urllib.error.URLError as exc:
        raise OSError(f"GET {path}: {exc.reason}") from None
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"GET {path}: not JSON ({exc})") from None


def load_api_client(kubeconfig: str | None) -> Any:
    """A `kubernetes.client.ApiClient` from a kubeconfig file, $KUBECONFIG, or the in-cluster config."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    return client.ApiClient(cfg)


def list_nodes(kubeconfig: str | None) -> list[dict[str, Any]]:
    """Every Node object as the API server serves it (JSON), through `load_api_client`."""
    from kubernetes import client

    api = client.CoreV1Api(load_api_client(kubeconfig))
    resp: Any = api.list_node(_preload_content=False)  # the raw response: JSON, not the typed model
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items
