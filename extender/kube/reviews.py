"""Who a caller is, and what it may do, as the API server says: TokenReview and SubjectAccessReview.

The extender keeps no credentials of its own for its readers. A bearer token is handed to the API
server (`authentication.k8s.io/v1` TokenReview, with the audience the chart gives job pods'
projected tokens), and an admin's request is checked with a SubjectAccessReview
(`authorization.k8s.io/v1`) on a resource of the group `topogang.io` that exists only in RBAC
(`clusterstatus`, `gangs`; the chart's ClusterRole `topogang-viewer` grants `get` and `list`).

A pod's projected ServiceAccount token names its pod (`user.extra`
`authentication.kubernetes.io/pod-name` and `pod-uid`): that is how a job pod is told from any other
holder of its namespace's ServiceAccount, and the door then checks the pod exists with that UID.

Answers are kept briefly (a minute; a refusal ten seconds) in caches bounded in entries, keyed by a
hash of the token (the token itself is never kept), so a gang of thousands of barriers polling every
few seconds costs one review per pod per minute. Concurrent reviews of one token share one request.
An unreachable API server is an error (the door answers 503), never a yes.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

from extender.http.doors import AuthorityUnavailableError, Caller, GangRef, PodRef
from extender.kube.client import ApiError, AsyncKube

log = logging.getLogger("topogang.kube")

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
API_GROUP = "topogang.io"  # the group of the RBAC-only resources an admin is granted
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"
DEFAULT_AUDIENCE = "topogang"
MAX_TOKEN_BYTES = 16 * 1024  # a ServiceAccount JWT is ~1 KiB; an OIDC token a few
KEEP_SECONDS = 60.0
KEEP_REFUSAL_SECONDS = 10.0
MAX_ENTRIES = 16_384
# API calls made for readers at once (reviews, pod lookups, the Framework proxy's reads). Anybody may
# send a token never seen before, each one a review, a job pod may read its Framework as often as it
# likes, and every API call of the extender (Bindings, evictions) shares one pool of worker threads
# (`AsyncKube`): readers' calls past these wait here, in the event loop, not in that pool ahead of
# kube-scheduler's binds
MAX_READER_CALLS = 4

K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Answers kept for a while, at most `max_entries` of them (the oldest go first)."""

    def __init__(self, clock: Callable[[], float], max_entries: int = MAX_ENTRIES) -> None:
        self.clock = clock
        self.max_entries = max_entries
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        got = self._items.get(key)
        if got is None:
            return False, None
        if got[0] <= self.clock():
            del self._items[key]
            return False, None
        return True, got[1]

    def put(self, key: K, value: V, seconds: float) -> None:
        self._items[key] = (self.clock() + seconds, value)
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def caller_of(status: Mapping[str, Any]) -> Caller | None:
    """The caller a TokenReview's `status` describes, or None when it is not authenticated."""
    if status.get("authenticated") is not True:
        return None
    user = status.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("username"), str) or not user["username"]:
        return None
    extra_raw = user.get("extra") if isinstance(user.get("extra"), dict) else {}
    extra: dict[str, tuple[str, ...]] = {}
    for key, values in (extra_raw or {}).items():
        if isinstance(key, str) and isinstance(values, list):
            extra[key] = tuple(str(v) for v in values if isinstance(v, str))
    groups = tuple(g for g in (user.get("groups") or []) if isinstance(g, str))
    name = user["username"]
    pod = None
    pod_name, pod_uid = extra.get(POD_NAME, ()), extra.get(POD_UID, ())
    if name.startswith(SA_PREFIX) and len(pod_name) == 1 and len(pod_uid) == 1:
        namespace = name[len(SA_PREFIX) :].split(":", 1)[0]
        if namespace and pod_name[0] and pod_uid[0]:
            pod = PodRef(namespace, pod_name[0], pod_uid[0])
    uid = user.get("uid")
    return Caller(name, uid if isinstance(uid, str) else "", groups, tuple(sorted(extra.items())), pod)


class Reviews:
    """TokenReview and SubjectAccessReview through the extender's own API connection, cached."""

    def __init__(
        self,
        kube: AsyncKube,
        *,
        audience: str = DEFAULT_AUDIENCE,
        clock: Callable[[], float] = time.monotonic,
        keep_seconds: float = KEEP_SECONDS,
        keep_refusal_seconds: float = KEEP_REFUSAL_SECONDS,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.kube = kube
        self.audience = audience
        self.keep = keep_seconds
        self.keep_refusal = keep_refusal_seconds
        self.tokens: TtlCache[bytes, Caller | None] = TtlCache(clock, max_entries)
        self.access: TtlCache[tuple[Caller, str, str], bool] = TtlCache(clock, max_entries)
        self._inflight: dict[object, asyncio.Future[Any]] = {}
        self.sending = asyncio.Semaphore(MAX_READER_CALLS)  # readers' API calls (`MAX_READER_CALLS`)
        self.calls = 0  # reviews sent to the API server (tests read it: the cache is real)

    async def authenticate(self, token: str) -> Caller | None:
        """The token's caller, or None when the API server does not accept it (for our audience)."""
        if not token or len(token) > MAX_TOKEN_BYTES or not token.isascii():
            return None
        key = hashlib.sha256(token.encode()).digest()
        hit, caller = self.tokens.get(key)
        if hit:
            return caller
        got: Caller | None = await self._once(("token", key), lambda: self._review_token(token))
        self.tokens.put(key, got, self.keep if got is not None else self.keep_refusal)
        return got

    async def may(self, caller: Caller, verb: str, resource: str) -> bool:
        """Whether RBAC lets the caller `verb` the `topogang.io` resource `resource`."""
        key = (caller, verb, resource)
        hit, allowed = self.access.get(key)
        if hit:
            return bool(allowed)
        got: bool = await self._once(("access", key), lambda: self._review_access(caller, verb, resource))
        self.access.put(key, got, self.keep if got else self.keep_refusal)
        return got

    async def _once(self, key: object, ask: Callable[[], Awaitable[Any]]) -> Any:
        """One request per key at a time: the others wait for its answer."""
        me = asyncio.current_task()
        before = me.cancelling() if me is not None else 0
        pending = self._inflight.get(key)
        while pending is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled() or (me is not None and me.cancelling() > before):
                    raise  # this request was cancelled itself (maybe in the same turn as the first)
            pending = self._inflight.get(key)  # the first asker went away: ask again
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            out = await ask()
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: a lone caller's failure is not "never retrieved"
            raise
        except BaseException:
            fut.cancel()
            raise
        finally:
            self._inflight.pop(key, None)
        fut.set_result(out)
        return out

    async def _post(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            async with self.sending:
                self.calls += 1
                out = await self.kube.request("POST", path, body=body)
        except (ApiError, OSError, TimeoutError) as err:
            log.warning("%s failed: %s", path.rsplit("/", 1)[-1], err)
            raise AuthorityUnavailableError(f"the API server cannot review the request now: {err}") from err
        status = (out or {}).get("status")
        return status if isinstance(status, dict) else {}

    async def _review_token(self, token: str) -> Caller | None:
        spec: dict[str, Any] = {"token": token}
        if self.audience:
            spec["audiences"] = [self.audience]
        status = await self._post(
            TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        )
        # valid, but not for us: a token meant for somebody else is not replayed here. A reviewer that
        # names no audience (an authenticating proxy, a webhook unaware of them) vouches only for the
        # API server's own: upstream's TokenReviewStatus asks the client to check the audience it set
        if self.audience and self.audience not in (status.get("audiences") or []):
            return None
        return caller_of(status)

    async def _review_access(self, caller: Caller, verb: str, resource: str) -> bool:
        spec: dict[str, Any] = {
            "user": caller.user,
            "groups": list(caller.groups),
            "extra": {k: list(v) for k, v in caller.extra},
            "resourceAttributes": {"group": API_GROUP, "resource": resource, "verb": verb},
        }
        if caller.uid:
            spec["uid"] = caller.uid
        status = await self._post(
            ACCESS_REVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        return status.get("allowed") is True and status.get("denied") is not True


class KubeAuthority(Reviews):
    """The doors' authority in Kubernetes mode: reviews, plus the pods the extender watches.

    `locate(uid)` is the watched cache ((namespace, name) of every opted-in pod); a pod not in it
    (not opted in, or the watch not there yet) is read from the API server by `fetch_pod`, and the
    answer kept as long as a token review. `gang_of` reads the gang ledger."""

    def __init__(
        self,
        kube: AsyncKube,
        *,
        locate: Callable[[str], tuple[str, str] | None],
        fetch_pod: Callable[[str, str], Awaitable[Mapping[str, Any] | None]],
        gang_of: Callable[[PodRef], GangRef | None],
        **kw: Any,
    ) -> None:
        super().__init__(kube, **kw)
        self.locate = locate
        self.fetch_pod = fetch_pod
        self._gang_of = gang_of
        self.pods: TtlCache[PodRef, bool] = TtlCache(self.tokens.clock, self.tokens.max_entries)

    async def pod_exists(self, pod: PodRef) -> bool:
        if self.locate(pod.uid) == (pod.namespace, pod.name):
            return True
        hit, known = self.pods.get(pod)
        if hit:
            return bool(known)
        try:
            async with self.sending:
                obj = await self.fetch_pod(pod.namespace, pod.name)
        except (ApiError, OSError, TimeoutError) as err:
            raise AuthorityUnavailableError(f"cannot read pod {pod.namespace}/{pod.name}: {err}") from err
        meta = (obj or {}).get("metadata")
        exists = isinstance(meta, dict) and meta.get("uid") == pod.uid and not meta.get("deletionTimestamp")
        self.pods.put(pod, exists, self.keep if exists else self.keep_refusal)
        return exists

    def gang_of(self, pod: PodRef) -> GangRef | None:
        return self._gang_of(pod)
