"""TLS serving, and client-certificate verification for the scheduling verbs.

Only kube-scheduler should be able to call filter/prioritize/preempt/bind: a verb can reserve or
bind GPUs. But kubelet probes, `topogang barrier` in job pods, Prometheus and browsers must still
reach the read-only endpoints without a client certificate. So when a client CA is given the
extender listens twice on one app: the main address (TLS if a certificate is given, no client
certificate asked) and a verbs address whose TLS handshake requires a certificate signed by that CA.
`VerbsGuard` refuses the verbs on any other listener, so no route around the check exists.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

VERB_PREFIX = "/v1/extender/"


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert: str | None = None
    key: str | None = None
    client_ca: str | None = None

    @property
    def enabled(self) -> bool:
        return self.cert is not None

    def problems(self) -> list[str]:
        out = []
        if (self.cert is None) != (self.key is None):
            out.append("--tls-cert and --tls-key go together")
        if self.client_ca is not None and self.cert is None:
            out.append("--client-ca needs --tls-cert and --tls-key (the verbs listener speaks TLS)")
        return out

    def uvicorn_options(self, *, require_client_cert: bool) -> dict[str, Any]:
        """uvicorn.Config keyword arguments for one listener."""
        if self.cert is None:
            return {}
        opts: dict[str, Any] = {"ssl_certfile": self.cert, "ssl_keyfile": self.key}
        if require_client_cert and self.client_ca is not None:
            opts["ssl_ca_certs"] = self.client_ca
            opts["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return opts


class VerbsGuard:
    """ASGI middleware: the extender verbs answer only on the client-certificate listener."""

    def __init__(self, app: ASGIApp, verbs_port: int) -> None:
        self.app = app
        self.verbs_port = verbs_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(VERB_PREFIX):
            server = scope.get("server") or (None, None)
            if server[1] != self.verbs_port:
                body = orjson.dumps(
                    {"Error": "the scheduling verbs are served only on the client-certificate listener"}
                )
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
