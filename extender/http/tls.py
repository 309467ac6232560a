"""TLS serving, and the verbs' door: only kube-scheduler may call filter/prioritize/preempt/bind.

A verb can reserve GPUs, bind another team's pod or (filter-time preemption) delete running pods, so
the verbs are served on a listener of their own (`extender.http.app.build_apps`: `verbs_app`), apart
from what job pods, Prometheus, probes and browsers read (`read_app`). With a client CA the verbs
listener's TLS handshake requires a certificate signed by it (mutual TLS), and then an identity check
(`VerbsDoor`): the certificate's subject CN or one of its subjectAltNames must be one the admin
allowed (`--verbs-allowed-names`), since a CA that signs kube-scheduler's certificate may sign others
(a cluster CA signs every kubelet's). Anything else is answered 403 and reaches no verb.

The peer certificate reaches the app through `CertifiedHttpTools`, uvicorn's protocol with the
handshake's certificate put in the request scope (the ASGI TLS extension's place for it).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from extender.http.httpproto import JSONErrorsHttpTools

VERB_PREFIX = "/v1/extender/"
PEER_NAMES = "topogang.peer_names"  # the scope["extensions"]["tls"] key holding the peer's names


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """`cert`/`key` serve HTTPS on the read listener (and on the verbs listener unless `verbs_cert`
    is given); `client_ca` makes the verbs listener require client certificates it signed, and
    `allowed_names` are the certificate names (CN or subjectAltName) let through to the verbs."""

    cert: str | None = None
    key: str | None = None
    client_ca: str | None = None
    verbs_cert: str | None = None
    verbs_key: str | None = None
    allowed_names: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        """HTTPS on the read listener."""
        return self.cert is not None

    @property
    def verbs_enabled(self) -> bool:
        """HTTPS on the verbs listener."""
        return (self.verbs_cert or self.cert) is not None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def problems(self) -> list[str]:
        out = []
        if (self.cert is None) != (self.key is None):
            out.append("--tls-cert and --tls-key go together")
        if (self.verbs_cert is None) != (self.verbs_key is None):
            out.append("--verbs-tls-cert and --verbs-tls-key go together")
        if self.client_ca is not None and not self.verbs_enabled:
            out.append(
                "--client-ca needs a serving certificate for the verbs listener "
                "(--verbs-tls-cert/--verbs-tls-key, or --tls-cert/--tls-key)"
            )
        if self.allowed_names and self.client_ca is None:
            out.append("--verbs-allowed-names needs --client-ca (names are read from client certificates)")
        if self.client_ca is not None and not self.allowed_names:
            out.append(
                "--client-ca needs --verbs-allowed-names: any certificate the CA signed would otherwise "
                "reach the verbs (name kube-scheduler's certificate CN or subjectAltName)"
            )
        return out

    def uvicorn_options(self, *, verbs: bool) -> dict[str, Any]:
        """uvicorn.Config keyword arguments for the verbs listener or the read listener."""
        cert, key = (self.verbs_cert, self.verbs_key) if verbs and self.verbs_cert else (self.cert, self.key)
        if cert is None:
            return {}
        opts: dict[str, Any] = {"ssl_certfile": cert, "ssl_keyfile": key}
        if verbs and self.client_ca is not None:
            opts["ssl_ca_certs"] = self.client_ca
            opts["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return opts


def peer_names(cert: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names a verified peer certificate (`SSLObject.getpeercert()`) carries: its subject's
    commonName(s), then every subjectAltName value (DNS, IP, URI, email), in the certificate's order."""
    if not cert:
        return ()
    out: list[str] = []
    for rdn in cert.get("subject", ()):
        for attr in rdn:
            if len(attr) == 2 and attr[0] == "commonName" and isinstance(attr[1], str):
                out.append(attr[1])
    for entry in cert.get("subjectAltName", ()):
        if len(entry) == 2 and isinstance(entry[1], str):
            out.append(entry[1])
    return tuple(out)


class CertifiedHttpTools(JSONErrorsHttpTools):
    """uvicorn's HTTP protocol with the TLS peer certificate's names in every request's scope
    (`scope["extensions"]["tls"][PEER_NAMES]`): read once per connection, after the handshake."""

    peer: tuple[str, ...] = ()

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.peer = peer_names(transport.get_extra_info("peercert"))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = {"tls": {PEER_NAMES: self.peer}}


def _refuse(status: int, message: str) -> tuple[dict[str, Any], dict[str, Any]]:
    body = orjson.dumps({"Error": message})
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    }
    return start, {"type": "http.response.body", "body": body}


class VerbsDoor:
    """ASGI middleware in front of the verbs app: with `allowed` names, a request whose TLS client
    certificate carries none of them is answered 403 (naming what it carried) and reaches nothing."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.allowed:
            tls = (scope.get("extensions") or {}).get("tls") or {}
            names = tuple(tls.get(PEER_NAMES, ()))
            if not self.allowed.intersection(names):
                shown = ", ".join(repr(n[:80]) for n in names[:4]) or "no client certificate"
                start, body = _refuse(
                    403,
                    f"topogang: the scheduling verbs are for kube-scheduler only: the client certificate "
                    f"({shown}) is not one of --verbs-allowed-names",
                )
                await send(start)
                await send(body)
                return
        await self.app(scope, receive, send)
