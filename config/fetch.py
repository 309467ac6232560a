"""Reading the running extender's admin routes for `topogang diff --against`.

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
