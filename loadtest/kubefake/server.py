"""The fake API server: objects by path, watches, reviews (see the package's docstring)."""

from __future__ import annotations

import asyncio
import builtins
import copy
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from extender.kube.client import WATCH_SECONDS, ApiError, GoneError
from loadtest.kubefake.objects import Obj, Ref, _copied, _meta, _part, matches, merge_patch, parse_path


# ---------------------------------------------------------------------------------------- watches
@dataclass(eq=False)
class WatchStream:
    """One open watch: the events for it, queued as the server writes them."""

    kind_key: tuple[str, str]
    namespace: str | None
    query: tuple[tuple[str, str], ...]
    lag: float = 0.0  # each event is delivered this many seconds after it happened
    queue: deque[tuple[float, str, Obj]] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    fault: BaseException | None = None  # raised at the next read (a cut connection)
    ended: bool = False  # the server ended the watch (its timeout): the iteration just stops
    idle: bool = False  # the reader is waiting with nothing queued: it has handled every event
    delivered_rv: int = 0
    ends_at: float = float("inf")  # the server ends the watch then (its timeoutSeconds)

    def wants(self, kind_key: tuple[str, str], obj: Mapping[str, Any]) -> bool:
        if kind_key != self.kind_key:
            return False
        if self.namespace is not None and _meta(obj).get("namespace") != self.namespace:
            return False
        return matches(obj, self.query)

    def put(self, due: float, kind: str, obj: Obj) -> None:
        self.queue.append((due + self.lag, kind, obj))
        self.wake.set()

    async def next(self) -> tuple[str, Obj] | None:
        loop = asyncio.get_running_loop()
        while True:
            if self.fault is not None:
                raise self.fault
            if self.ended:
                return None
            if self.queue:
                due, kind, obj = self.queue[0]
                if due > loop.time():  # watch lag (events queue in due order)
                    await asyncio.sleep(due - loop.time())
                    continue
                self.queue.popleft()
                rv = _meta(obj).get("resourceVersion")
                if isinstance(rv, str) and rv.isdigit():
                    self.delivered_rv = max(self.delivered_rv, int(rv))
                return kind, obj
            self.idle = True
            self.wake.clear()
            waiter = asyncio.ensure_future(self.wake.wait())
            left = self.ends_at - loop.time()
            try:
                await asyncio.wait([waiter], timeout=left if left != float("inf") else None)
            finally:
                waiter.cancel()
                self.idle = False
            if loop.time() >= self.ends_at and not self.queue:
                return None


# ---------------------------------------------------------------------------------------- server
class FakeApiServer:
    """Objects by path, a resourceVersion counter, a change log for watches."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        wall_offset: float = 1_700_000_000.0,
        log_size: int = 2000,
    ) -> None:
        self.clock = clock or (lambda: asyncio.get_running_loop().time())
        self.wall_offset = wall_offset  # wall time = clock + offset (timestamps in objects)
        self.objects: dict[tuple[str, str, str, str], Obj] = {}
        self.rv = 0
        self.log: deque[tuple[int, tuple[str, str], str, Obj]] = deque(maxlen=log_size)
        self.first_rv = 1  # the oldest resourceVersion a watch may resume from
        self.streams: dict[WatchStream, None] = {}  # ordered: a seed replays the same deliveries
        self.uids = 0
        self.names = 0
        self.events: deque[Obj] = deque(maxlen=200)  # the latest Events, for a test to read
        self.event_count = 0
        self.absent: set[tuple[str, str]] = set()  # resource types "not installed" (404)
        self.watch_seconds = float(WATCH_SECONDS)  # a watch ends cleanly after this, as the client asks
        self.tokens: dict[str, tuple[Obj, tuple[str, ...]]] = {}  # token -> (user, audiences)
        self.grants: set[tuple[str, str, str, str]] = set()  # (user or group, group, resource, verb)
        self.reviews = 0
        self.audience_unaware = False  # a TokenReview authenticator that ignores (and names no) audiences

    # -------------------------------------------------------------------- bookkeeping
    def _now_text(self) -> str:
        return datetime.fromtimestamp(self.clock() + self.wall_offset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _new_uid(self) -> str:
        self.uids += 1
        return f"00000000-0000-4000-8000-{self.uids:012x}"

    def _record(self, ref: Ref, kind: str, obj: Obj) -> None:
        """Stamp a new resourceVersion on `obj` (already stored, or just removed) and tell watches."""
        self.rv += 1
        _meta(obj)["resourceVersion"] = str(self.rv)
        snapshot = copy.deepcopy(obj)
        if self.log.maxlen is not None and len(self.log) == self.log.maxlen:
            self.first_rv = self.log[0][0] + 1
        self.log.append((self.rv, ref.kind_key, kind, snapshot))
        now = self.clock()
        for s in self.streams:
            if s.wants(ref.kind_key, snapshot):
                s.put(now, kind, copy.deepcopy(snapshot))

    def compact(self) -> None:
        """Forget the change log (etcd compaction): a watch resuming from before now gets 410."""
        self.log.clear()
        self.first_rv = self.rv + 1

    def bookmark(self) -> None:
        """Every open watch gets a BOOKMARK carrying the current resourceVersion."""
        for s in self.streams:
            s.put(self.clock(), "BOOKMARK", {"metadata": {"resourceVersion": str(self.rv)}})

    def _known(self, ref: Ref) -> None:
        if ref.kind_key in self.absent:
            raise ApiError(404, f"the server has no resource type {ref.resource}", "NotFound")

    # -------------------------------------------------------------------- reads
    def get(self, path: str) -> Obj | None:
        ref = parse_path(path)
        self._known(ref)
        if ref.name is None:
            raise ApiError(405, "GET of a collection: use list", "MethodNotAllowed")
        obj = self.objects.get(ref.key)
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, path: str, query: Sequence[tuple[str, str]] = ()) -> tuple[builtins.list[Obj], str]:
        ref = parse_path(path)
        self._known(ref)
        if ref.name is not None:
            raise ApiError(405, f"{path} is not a collection", "MethodNotAllowed")
        items = [
            o
            for (gv, res, ns, _), o in sorted(self.objects.items())
            if (gv, res) == ref.kind_key
            and (ref.namespace is None or ns == ref.namespace)
            and matches(o, query)
        ]
        return _copied(items), str(self.rv)

    def items(self, gv: str, resource: str) -> builtins.list[Obj]:
        """Every stored object of one type (the live dicts: read, do not change)."""
        return [o for (g, r, _, _), o in self.objects.items() if (g, r) == (gv, resource)]

    # -------------------------------------------------------------------- writes
    def create(self, path: str, body: Mapping[str, Any]) -> Obj:
        ref = parse_path(path)
        self._known(ref)
        if ref.subresource is not None or (ref.name is not None and ref.subresource is None):
            raise ApiError(405, f"POST to {path}", "MethodNotAllowed")
        obj: Obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise ApiError(422, "metadata.name or generateName is required", "Invalid")
            self.names += 1
            meta["name"] = f"{prefix}{self.names:05x}"
        if ref.namespace is not None:
            if meta.get("namespace") not in (None, "", ref.namespace):
                raise ApiError(400, "the namespace of the object does not match the path", "BadRequest")
            meta["namespace"] = ref.namespace
        key = (ref.group_version, ref.resource, ref.namespace or "", meta["name"])
        if key in self.objects:
            raise ApiError(409, f'{ref.resource} "{meta["name"]}" already exists', "AlreadyExists")
        meta["uid"] = self._new_uid()
        meta["creationTimestamp"] = self._now_text()
        meta.pop("deletionTimestamp", None)
        self.objects[key] = obj
        self._record(ref, "ADDED", obj)
        return copy.deepcopy(obj)

    def _existing(self, ref: Ref) -> Obj:
        obj = self.objects.get(ref.key)
        if obj is None:
            raise ApiError(404, f'{ref.resource} "{ref.name}" not found', "NotFound")
        return obj

    @staticmethod
    def _preconditions(obj: Obj, uid: object, rv: object, what: str) -> None:
        meta = _meta(obj)
        if uid and uid != meta.get("uid"):
            raise ApiError(
                409,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}",
                "Conflict",
            )
        if rv and rv != meta.get("resourceVersion"):
            raise ApiError(
                409,
                f"Operation cannot be fulfilled on {what}: the object has been modified; "
                "please apply your changes to the latest version and try again",
                "Conflict",
            )

    def replace(self, path: str, body: Mapping[str, Any]) -> Obj:
        ref = parse_path(path)
        self._known(ref)
        obj = self._existing(ref)
        new = copy.deepcopy(dict(body))
        nm = _part(new, "metadata")
        self._preconditions(obj, nm.get("uid"), nm.get("resourceVersion"), f"{ref.resource} {ref.name!r}")
        return self._store(ref, obj, new)

    def patch(self, path: str, body: Mapping[str, Any]) -> Obj:
        ref = parse_path(path)
        self._known(ref)
        obj = self._existing(ref)
        pm = _part(body, "metadata")
        self._preconditions(obj, pm.get("uid"), pm.get("resourceVersion"), f"{ref.resource} {ref.name!r}")
        return self._store(ref, obj, merge_patch(obj, body))

    def _store(self, ref: Ref, old: Obj, new: Obj) -> Obj:
        if ref.subresource == "status":
            out = copy.deepcopy(old)
            out["status"] = new.get("status")
        elif ref.subresource is None:
            out = new
            if "status" not in out and "status" in old:  # the main resource does not clear status
                out["status"] = copy.deepcopy(old["status"])
        else:
            raise ApiError(404, f"{ref.resource}/{ref.subresource} cannot be updated", "NotFound")
        meta = out.setdefault("metadata", {})
        keep = _meta(old)
        for k in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
            if k in keep:
                meta[k] = keep[k]
        self.objects[ref.key] = out
        self._record(ref, "MODIFIED", out)
        return copy.deepcopy(out)

    def delete(self, path: str, body: Mapping[str, Any] | None = None) -> Obj:
        ref = parse_path(path)
        self._known(ref)
        if ref.subresource is not None:
            raise ApiError(405, f"DELETE of {path}", "MethodNotAllowed")
        obj = self._existing(ref)
        opts = body or {}
        pre = _part(opts, "preconditions")
        self._preconditions(obj, pre.get("uid"), pre.get("resourceVersion"), f"{ref.resource} {ref.name!r}")
        graceful = ref.kind_key == ("v1", "pods") and opts.get("gracePeriodSeconds") != 0
        spec = _part(obj, "spec")
        status = _part(obj, "status")
        if graceful and spec.get("nodeName") and status.get("phase") not in ("Succeeded", "Failed"):
            meta = _meta(obj)
            if meta.get("deletionTimestamp") is None:  # the kubelet stops it, then `finalize`
                meta["deletionTimestamp"] = self._now_text()
                meta["deletionGracePeriodSeconds"] = int(spec.get("terminationGracePeriodSeconds", 30))
                self._record(ref, "MODIFIED", obj)
            return copy.deepcopy(obj)
        return self._remove(ref)

    def _remove(self, ref: Ref) -> Obj:
        obj = self.objects.pop(ref.key)
        self._record(ref, "DELETED", obj)
        return copy.deepcopy(obj)

    def finalize(self, path: str) -> bool:
        """The kubelet has stopped a pod being deleted: it goes for good (False: it was gone)."""
        ref = parse_path(path)
        if ref.name is None or ref.key not in self.objects:
            return False
        self._remove(ref)
        return True

    # -------------------------------------------------------------------- subresources
    def bind(self, ref: Ref, body: Mapping[str, Any]) -> Obj:
        """`pods/{name}/binding`: node and annotations onto the pod, as the registry's `assignPod`."""
        pod = self._existing(Ref(ref.group_version, ref.resource, ref.namespace, ref.name, None))
        meta, bmeta = _meta(pod), _part(body, "metadata")
        self._preconditions(pod, bmeta.get("uid"), None, f"pods {ref.name!r}")
        target = _part(body, "target")
        node = target.get("name")
        if not isinstance(node, str) or not node:
            raise ApiError(422, "Binding.target.name is required", "Invalid")
        if meta.get("deletionTimestamp") is not None:
            raise ApiError(409, f"pod {ref.name} is being deleted, cannot be assigned to a host", "Conflict")
        spec = pod.setdefault("spec", {})
        if spec.get("nodeName"):
            raise ApiError(
                409,
                f"Operation cannot be fulfilled on pods/binding {ref.name!r}: pod {ref.name} is already "
                f"assigned to node {spec['nodeName']!r}",
                "Conflict",
            )
        spec["nodeName"] = node
        ann = bmeta.get("annotations")
        if isinstance(ann, dict) and ann:
            meta.setdefault("annotations", {}).update({str(k): str(v) for k, v in ann.items()})
        status = pod.setdefault("status", {})
        status.setdefault("conditions", []).append({"type": "PodScheduled", "status": "True"})
        self._record(Ref(ref.group_version, ref.resource, ref.namespace, ref.name, None), "MODIFIED", pod)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    # -------------------------------------------------------------------- setting the scene
    def put(self, path: str, body: Mapping[str, Any]) -> Obj:
        """Store an object as it is given (its UID and status kept; a new resourceVersion), as if
        written straight to etcd: how a test sets the scene. Watches see ADDED, or MODIFIED."""
        ref = parse_path(path)
        if ref.name is None or ref.subresource is not None:
            raise ValueError(f"put needs an object's path, not {path}")
        obj: Obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        meta["name"] = ref.name
        if ref.namespace is not None:
            meta["namespace"] = ref.namespace
        meta.setdefault("uid", self._new_uid())
        meta.setdefault("creationTimestamp", self._now_text())
        kind = "MODIFIED" if ref.key in self.objects else "ADDED"
        self.objects[ref.key] = obj
        self._record(ref, kind, obj)
        return copy.deepcopy(obj)

    def at(self, path: str) -> Obj:
        """The stored object itself (read it, do not change it); KeyError when there is none."""
        return self.objects[parse_path(path).key]

    def forget(self, path: str) -> None:
        """Remove an object at once, as a test that sets the scene needs (watches see DELETED)."""
        ref = parse_path(path)
        if ref.key in self.objects:
            self._remove(ref)

    # -------------------------------------------------------------------- authentication
    def add_token(
        self,
        token: str,
        username: str,
        *,
        groups: Sequence[str] = (),
        extra: Mapping[str, Sequence[str]] | None = None,
        audiences: Sequence[str] = ("",),
    ) -> None:
        """A token the server accepts for `audiences` ("" is the server's own)."""
        user: Obj = {
            "username": username,
            "uid": f"uid-{username}",
            "groups": [*groups, "system:authenticated"],
        }
        if extra:
            user["extra"] = {k: list(v) for k, v in extra.items()}
        self.tokens[token] = (user, tuple(audiences))

    def pod_token(
        self,
        token: str,
        pod: Mapping[str, Any],
        *,
        sa: str = "default",
        audiences: Sequence[str] = ("topogang",),
    ) -> None:
        """A projected ServiceAccount token bound to `pod` (its name and UID in the user's extra)."""
        meta = _meta(pod)
        ns = str(meta.get("namespace") or "default")
        extra = {
            "authentication.kubernetes.io/pod-name": [str(meta["name"])],
            "authentication.kubernetes.io/pod-uid": [str(meta["uid"])],
        }
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}"]
        self.add_token(
            token, f"system:serviceaccount:{ns}:{sa}", groups=groups, extra=extra, audiences=audiences
        )

    def grant(self, subject: str, resource: str, verb: str, group: str = "topogang.io") -> None:
        """RBAC: `subject` (a user name or a group) may `verb` `resource` of `group`."""
        self.grants.add((subject, group, resource, verb))

    def _token_review(self, body: Mapping[str, Any]) -> Obj:
        self.reviews += 1
        spec = _part(body, "spec")
        wanted = [a for a in spec.get("audiences") or [] if isinstance(a, str)] or [""]
        got = self.tokens.get(str(spec.get("token") or ""))
        status: Obj = {"authenticated": False, "error": "invalid bearer token"}
        if got is not None and self.audience_unaware:
            return {**dict(body), "status": {"authenticated": True, "user": copy.deepcopy(got[0])}}
        if got is not None:
            user, audiences = got
            common = [a for a in wanted if a in audiences]
            if common:
                status = {"authenticated": True, "user": copy.deepcopy(user)}
                if spec.get("audiences"):
                    status["audiences"] = common
            else:
                status = {"authenticated": False, "error": "token audiences do not match"}
        return {**dict(body), "status": status}

    def _access_review(self, body: Mapping[str, Any]) -> Obj:
        self.reviews += 1
        spec = _part(body, "spec")
        attrs = _part(spec, "resourceAttributes")
        subjects = [spec.get("user"), *(spec.get("groups") or [])]
        allowed = any(
            (who, attrs.get("group", ""), attrs.get("resource"), attrs.get("verb")) in self.grants
            for who in subjects
        )
        return {**dict(body), "status": {"allowed": allowed}}

    # -------------------------------------------------------------------- the request surface
    def handle(
        self, method: str, path: str, query: Sequence[tuple[str, str]], body: Mapping[str, Any] | None
    ) -> Obj:
        """One request; ApiError for any non-2xx answer (404 included)."""
        ref = parse_path(path)
        pods = ref.kind_key == ("v1", "pods")
        if method == "POST" and ref.resource == "events" and ref.name is None:
            self.event_count += 1
            self.events.append(copy.deepcopy(dict(body or {})))
            return dict(body or {})
        if method == "POST" and ref.kind_key == ("authentication.k8s.io/v1", "tokenreviews"):
            return self._token_review(body or {})
        if method == "POST" and ref.kind_key == ("authorization.k8s.io/v1", "subjectaccessreviews"):
            return self._access_review(body or {})
        if method == "POST" and pods and ref.subresource == "binding":
            return self.bind(ref, body or {})
        if method == "POST" and pods and ref.subresource == "eviction":
            self.delete(path.rsplit("/", 1)[0], _part(body or {}, "deleteOptions"))
            return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        if method == "GET":
            if ref.name is None:
                items, rv = self.list(path, query)
                return {"kind": "List", "metadata": {"resourceVersion": rv}, "items": items}
            got = self.get(path)
            if got is None:
                raise ApiError(404, f'{ref.resource} "{ref.name}" not found', "NotFound")
            return got
        if method == "POST":
            return self.create(path, body or {})
        if method == "PUT":
            return self.replace(path, body or {})
        if method == "PATCH":
            return self.patch(path, body or {})
        if method == "DELETE":
            return self.delete(path, body)
        raise ApiError(405, f"{method} {path}", "MethodNotAllowed")

    def open_watch(
        self, path: str, resource_version: str, query: Sequence[tuple[str, str]], lag: float
    ) -> WatchStream:
        ref = parse_path(path)
        self._known(ref)
        if ref.name is not None:
            raise ApiError(405, "watch of a single object is not supported here", "MethodNotAllowed")
        s = WatchStream(ref.kind_key, ref.namespace, tuple(query), lag)
        now = self.clock()
        s.ends_at = now + self.watch_seconds
        if resource_version in ("", "0"):
            for obj in self.list(path, query)[0]:
                s.put(now, "ADDED", obj)
        else:
            rv = int(resource_version)
            if rv + 1 < self.first_rv:
                raise GoneError(410, f"too old resource version: {rv} ({self.first_rv - 1})", "Expired")
            for at, kind_key, kind, obj in self.log:
                if at > rv and s.wants(kind_key, obj):
                    s.put(now, kind, copy.deepcopy(obj))
        self.streams[s] = None
        return s

    def close_watch(self, s: WatchStream) -> None:
        self.streams.pop(s, None)
