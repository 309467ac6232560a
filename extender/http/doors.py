"""Who may call which route: every route's door, and the middleware that keeps them.

    open     no tenant data: health, readiness, metrics (labels: phase, VC, chain/level/cell type,
             verb, outcome, reason, result, route; never a gang's or a pod's name), the index of
             paths, the cluster view's static files
    verbs    kube-scheduler's verbs: kept by their own listener (client certificates), not here. What
             they lead to on pods (Bindings, evictions, the requeue mark on a pod the filter turned
             away, `extender.kube.requeue`) is for pods the API server has as the body names them
    tenant   what a job pod reads about its own gang: the gang ledger's `/v1/gangs/{ns}/{name}` and
             the Framework proxy. A pod's ServiceAccount token (TokenReview, the chart's audience)
             names the pod; the pod must exist with that UID, and the gang it is a member of must be
             the one it asks for (the Framework proxy: its own FrameworkController framework).
             Anybody else needs what an admin needs to `get` `gangs.topogang.io`
    admin    every namespace's gangs, pods, nodes, GPUs and priorities: the inspect API, explain,
             the cluster view and its state, the list of all gangs, the config's status, the
             standalone bindings. A SubjectAccessReview on the RBAC-only resource this table names
             (group `topogang.io`; the chart's ClusterRole `topogang-viewer` grants them)

A route the table does not name is treated as `admin` (a new route is closed until it is given a
door; tests/extender/test_doors.py fails on it first). Without an authority (standalone mode: no API
server, the extender listens on 127.0.0.1) every door is open. A request that arrives on the admin
listener (`--admin-listen`, bound to 127.0.0.1 inside the pod: only `kubectl port-forward` reaches
it, and that is an RBAC permission of its own) passes every door.

401: no bearer token, or one the API server does not accept; 403: a token whose caller may not; 503:
the API server cannot be asked. Every refusal is JSON in the API server's `Status` shape (the stock
FrameworkBarrier's client parses it, and keeps polling on anything but 404) with `Error` as well.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import orjson
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from extender.ops.logtext import shown

log = logging.getLogger("topogang.extender")

FRAMEWORK_PATH = "/apis/frameworkcontroller.microsoft.com/v1/namespaces/{namespace}/frameworks/{name}"
GANG_PATH = "/v1/gangs/{namespace}/{name:path}"


class Door(StrEnum):
    OPEN = "open"
    VERBS = "verbs"
    TENANT = "tenant"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Rule:
    """A route's door; for `admin` (and an admin's way through `tenant`) the RBAC verb and resource
    of the group `topogang.io` a SubjectAccessReview asks about."""

    door: Door
    verb: str = ""
    resource: str = ""
    why: str = ""


_STATUS = Rule(Door.ADMIN, "get", "clusterstatus", "every VC's cells, gangs, pods, nodes and GPUs")
_GANG = Rule(Door.TENANT, "get", "gangs", "a pod's own gang; an admin's any gang")

# Every route of every mode, by its path template (all methods of a path share its door).
ROUTES: dict[str, Rule] = {
    "/": Rule(Door.OPEN, why="the list of paths"),
    "/healthz": Rule(Door.OPEN, why="liveness"),
    "/readyz": Rule(Door.OPEN, why="readiness and why not"),
    "/metrics": Rule(Door.OPEN, why="counts by phase, VC, level, verb: no gang or pod names"),
    "/ui/static": Rule(Door.OPEN, why="the cluster view's HTML, CSS and JS, no data"),
    "/v1/extender/filter": Rule(Door.VERBS, why="kube-scheduler"),
    "/v1/extender/prioritize": Rule(Door.VERBS, why="kube-scheduler"),
    "/v1/extender/preempt": Rule(Door.VERBS, why="kube-scheduler"),
    "/v1/extender/bind": Rule(Door.VERBS, why="kube-scheduler"),
    "/v1/inspect": _STATUS,
    "/v1/inspect/clusterstatus": _STATUS,
    "/v1/inspect/clusterstatus/physicalcluster": _STATUS,
    "/v1/inspect/clusterstatus/virtualclusters": _STATUS,
    "/v1/inspect/clusterstatus/virtualclusters/": _STATUS,
    "/v1/inspect/clusterstatus/virtualclusters/{vc}": _STATUS,
    "/v1/inspect/affinitygroups": _STATUS,
    "/v1/inspect/affinitygroups/": _STATUS,
    "/v1/inspect/affinitygroups/{name:path}": _STATUS,
    "/v1/explain": Rule(Door.ADMIN, "get", "clusterstatus", "which pods of any VC a gang would preempt"),
    "/ui": _STATUS,
    "/ui/": _STATUS,
    "/v1/ui/state": _STATUS,
    "/v1/config": Rule(Door.ADMIN, "get", "clusterstatus", "the config in force, its path and errors"),
    "/v1/gangs": Rule(Door.ADMIN, "list", "gangs", "every namespace's gangs"),
    "/v1/gangs/": Rule(Door.ADMIN, "list", "gangs", "every namespace's gangs"),
    GANG_PATH: _GANG,
    FRAMEWORK_PATH: Rule(Door.TENANT, "get", "gangs", "a pod's own Framework, projected for the barrier"),
    "/v1/standalone/pods/{uid}": Rule(Door.ADMIN, "get", "clusterstatus", "standalone only"),
    "/v1/standalone/bindings": Rule(Door.ADMIN, "get", "clusterstatus", "standalone only"),
    "/v1/standalone/nodes/{name}": Rule(Door.ADMIN, "get", "clusterstatus", "standalone only"),
}
UNNAMED = Rule(Door.ADMIN, "get", "clusterstatus", "a route without a door of its own")


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class GangRef:
    """The gang a pod is a member of, as the ledger's paths name it."""

    namespace: str
    name: str
    framework: bool  # a FrameworkController framework's attempt (the Framework proxy serves it)


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated user as TokenReview describes it; `pod` when the token is bound to a pod."""

    user: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]
    pod: PodRef | None = None

    def describe(self) -> str:
        if self.pod is not None:
            return f"pod {self.pod.namespace}/{self.pod.name}"
        return f"user {self.user}"


class AuthorityUnavailableError(Exception):
    """The API server cannot be asked now (the door answers 503, never yes)."""


class Authority(Protocol):
    """What the doors ask (Kubernetes mode: `extender.kube.reviews.KubeAuthority`)."""

    async def authenticate(self, token: str) -> Caller | None: ...

    async def may(self, caller: Caller, verb: str, resource: str) -> bool: ...

    async def pod_exists(self, pod: PodRef) -> bool: ...

    def gang_of(self, pod: PodRef) -> GangRef | None: ...


def rule_for(path: str) -> Rule:
    return ROUTES.get(path, UNNAMED)


def _bearer(scope: Scope) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == b"authorization":
            kind, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if kind.lower() == "bearer" and token.strip() else None
    return None


def status_doc(code: int, reason: str, message: str, **extra: Any) -> dict[str, Any]:
    """An error in the API server's `Status` shape, which Kubernetes clients (the stock
    FrameworkBarrier's client-go) parse; `extra` adds fields such as `details`."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
        **extra,
    }


async def _refuse(send: Send, status: int, reason: str, message: str) -> None:
    body = orjson.dumps(status_doc(status, reason, message, Error=message))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="topogang"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Doors:
    """ASGI middleware: finds the route a request is for and lets it through its door, or refuses."""

    def __init__(
        self,
        app: ASGIApp,
        routes: list[BaseRoute],
        authority: Authority | None,
        admin_port: int | None = None,
    ) -> None:
        self.app = app
        self.routes = routes
        self.authority = authority
        self.admin_port = admin_port

    def _match(self, scope: Scope) -> tuple[str, dict[str, str]] | None:
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                return str(getattr(route, "path", "")), dict(child.get("path_params") or {})
        return None  # no route (404) or another method's (405): the router's answers carry no data

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.authority is None:
            await self.app(scope, receive, send)
            return
        if self.admin_port is not None and (scope.get("server") or (None, None))[1] == self.admin_port:
            await self.app(scope, receive, send)
            return
        exact = ROUTES.get(scope.get("path", ""))
        if exact is not None and exact.door in (Door.OPEN, Door.VERBS):  # the verbs' hot path
            await self.app(scope, receive, send)
            return
        found = self._match(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        path, params = found
        rule = rule_for(path)
        if rule.door in (Door.OPEN, Door.VERBS):
            await self.app(scope, receive, send)
            return
        refusal = await self._judge(scope, rule, params, self.authority)
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        await self.app(scope, receive, send)

    async def _judge(
        self, scope: Scope, rule: Rule, params: dict[str, str], authority: Authority
    ) -> tuple[int, str, str] | None:
        """None to let the request in, else (status, reason, message)."""
        token = _bearer(scope)
        if token is None:
            return 401, "Unauthorized", "topogang: a bearer token is required (Authorization: Bearer ...)"
        try:
            caller = await authority.authenticate(token)
            if caller is None:
                return 401, "Unauthorized", "topogang: the API server does not accept this token for topogang"
            why = ""
            if rule.door is Door.TENANT and caller.pod is not None:
                framework = rule is not _GANG
                why = await self._own_gang(caller.pod, params, framework=framework, authority=authority)
                if not why:
                    return None
            if await authority.may(caller, rule.verb, rule.resource):
                return None
        except AuthorityUnavailableError as err:
            return 503, "ServiceUnavailable", f"topogang: {err}"
        denied = f"{caller.describe()} may not {rule.verb} {rule.resource}.topogang.io"
        log.info("refused %s %s: %s", scope.get("method"), shown(scope.get("path", "")), shown(why or denied))
        return 403, "Forbidden", f"topogang: {why or denied}"

    @staticmethod
    async def _own_gang(pod: PodRef, params: dict[str, str], *, framework: bool, authority: Authority) -> str:
        """Empty when the pod may read the gang (or Framework) the path names, else why not."""
        ns, name = params.get("namespace", ""), params.get("name", "")
        who = f"pod {pod.namespace}/{pod.name}"
        if not await authority.pod_exists(pod):
            return f"{who} (uid {pod.uid}) does not exist"
        gang = authority.gang_of(pod)
        if gang is None:
            return f"{who} is a member of no gang the extender knows"
        same = (gang.namespace, gang.name) == (ns, name) and pod.namespace == ns
        if same and (gang.framework or not framework):
            return ""
        what = "Framework" if framework else "gang"
        return f"{who} may read only its own {what} ({gang.namespace}/{gang.name}), not {ns}/{name}"
