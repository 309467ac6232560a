"""An in-memory API server behind the `AsyncKube` interface: objects by path, resourceVersions with
optimistic concurrency, the pod binding subresource, Events. Enough of the real one's rules that
the Kubernetes-mode service (recovery, durable reservations, the Lease) can be tested against it,
and a restart is simply a second service over the same fake."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from extender.kube.client import ApiError, AsyncKube, KubeApi


class ApiFake(AsyncKube):
    def __init__(self) -> None:
        super().__init__(KubeApi(None))
        self.objects: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.rv = 0
        self.calls: list[tuple[str, str]] = []
        self.missing_collections: set[str] = set()  # e.g. an uninstalled CRD: lists answer 404

    # ------------------------------------------------------------------ helpers for tests
    def store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"uid-{self.rv}")
        self.objects[path] = obj
        return obj

    def under(self, collection: str) -> list[dict[str, Any]]:
        prefix = collection.rstrip("/") + "/"
        return [
            o for p, o in sorted(self.objects.items()) if p.startswith(prefix) and "/" not in p[len(prefix) :]
        ]

    @staticmethod
    def pod_path(namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{namespace}/pods/{name}"

    # ------------------------------------------------------------------ AsyncKube
    async def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        self.calls.append((method, path))
        await asyncio.sleep(0)
        if method == "POST" and path.endswith("/binding"):
            pod = self.objects.get(path.removesuffix("/binding"))
            if pod is None:
                return None
            assert body is not None
            if pod["spec"].get("nodeName"):
                raise ApiError(409, "pod already assigned", "Conflict")
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = body["target"]["name"]
            ann = (body.get("metadata") or {}).get("annotations") or {}
            pod["metadata"].setdefault("annotations", {}).update(ann)
            pod["status"] = {"phase": "Running"}
            self.store(path.removesuffix("/binding"), pod)
            return {"kind": "Status", "status": "Success"}
        if method == "POST" and path.endswith("/events"):
            assert body is not None
            self.events.append(dict(body))
            return dict(body)
        if method == "GET":
            obj = self.objects.get(path)
            return copy.deepcopy(obj) if obj is not None else None
        if method == "POST":
            assert body is not None
            target = f"{path}/{body['metadata']['name']}"
            if target in self.objects:
                raise ApiError(409, "already exists", "AlreadyExists")
            return copy.deepcopy(self.store(target, dict(body)))
        if method == "PUT":
            assert body is not None
            current = self.objects.get(path)
            if current is None:
                return None
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "the object has been modified", "Conflict")
            return copy.deepcopy(self.store(path, dict(body)))
        if method == "DELETE":
            obj = self.objects.get(path)
            if obj is None:
                return None
            want = ((body or {}).get("preconditions") or {}).get("uid")
            if want is not None and want != obj["metadata"]["uid"]:
                raise ApiError(409, "uid precondition failed", "Conflict")
            del self.objects[path]
            return {"kind": "Status", "status": "Success"}
        raise ApiError(405, f"{method} {path}")

    async def list(
        self, path: str, query: Sequence[tuple[str, str]] = ()
    ) -> tuple[list[dict[str, Any]], str]:
        self.calls.append(("LIST", path))
        if path in self.missing_collections:
            raise ApiError(404, f"{path} not found")
        if path == "/api/v1/pods":
            items = [o for p, o in sorted(self.objects.items()) if "/pods/" in p]
        elif path == "/api/v1/nodes":
            items = self.under("/api/v1/nodes")
        else:
            items = self.under(path)
        return copy.deepcopy(items), str(self.rv)

    async def watch(
        self, path: str, resource_version: str, query: Sequence[tuple[str, str]] = ()
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Nothing changes behind the tests' backs: a watch that stays open, silent."""
        await asyncio.Event().wait()
        yield "BOOKMARK", {}
