"""The pod requests the verbs have read, by pod UID.

Bind carries only names, so the request a pod's filter read is kept for its bind (and read from the
API server when it is missing). The cache is bounded in bytes as well as entries (`ByteLRU`): what it
holds comes from what pods carry. Two indexes follow it in step: by name (a bind with a stale UID is
told which UID was filtered) and by gang (who may still claim a slot: a gang none of whose pods is
known alive was deleted before it started).
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.gangs.podspec import PodRequest
from extender.ops.bounded import ByteLRU

POD_CACHE_SIZE = 200_000
POD_CACHE_BYTES = 256 * 1024 * 1024


@dataclass(slots=True)
class _Cached:
    request: PodRequest
    spec_key: tuple[int, int] | None  # the spec text it was read from, as (length, hash): not the text
    epoch: int = 0  # the config it was read under (`PodCache.epoch`)


def _text_key(text: str | None) -> tuple[int, int] | None:
    """Which spec text a cached request came from, without keeping the text (up to 64 KiB a pod)."""
    return None if text is None else (len(text), hash(text))


def _cost(pr: PodRequest) -> int:
    """About what a cached request holds: the request and its names, and one key per named slot."""
    keys = pr.request.slot_keys
    return 1024 + len(pr.gang) + 96 * (len(keys) if keys is not None else 0)


class PodCache:
    """Pod requests by UID (least recently used go first), indexed by pod name and by gang."""

    def __init__(self, max_bytes: int = POD_CACHE_BYTES, max_entries: int = POD_CACHE_SIZE) -> None:
        self._pods: ByteLRU[str, _Cached] = ByteLRU(max_bytes, max_entries)
        self._uid_by_name: dict[tuple[str, str], str] = {}
        self._gang_pods: dict[str, set[str]] = {}  # cached pods by gang: who may still claim a slot
        # bumped by a reload that changes what a request is read with (a namespace's VC, the TTL, the
        # cluster's GPU count): a request read under an older config is read again, not reused
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._pods)

    def get(self, uid: str) -> PodRequest | None:
        c = self._pods.get(uid)
        return c.request if c is not None else None

    def read_from(self, uid: str, text: str | None) -> PodRequest | None:
        """The cached request if it was read from this very spec text under the config in force (an
        edited spec, or a config edited since, is read again)."""
        c = self._pods.get(uid)
        return (
            c.request if c is not None and c.spec_key == _text_key(text) and c.epoch == self.epoch else None
        )

    def uids(self) -> list[str]:
        """The UIDs of every pod whose request is cached (least recently used first)."""
        return list(self._pods)

    def uid_of(self, namespace: str, name: str) -> str | None:
        """The UID the pod of this name was last read with."""
        return self._uid_by_name.get((namespace, name))

    def others_in(self, gang: str, uid: str) -> bool:
        """Whether a pod of the gang other than `uid` is cached (known, and maybe still alive)."""
        return bool(self._gang_pods.get(gang, set()) - {uid})

    def others_under(self, gang: str, uid: str) -> bool:
        """`others_in` for the gang or a one-pod gang derived from it (`<gang>/solo/...`, `/extra/`)."""
        if self.others_in(gang, uid):
            return True
        heads = (f"{gang}/solo/", f"{gang}/extra/")
        return any(g.startswith(heads) and bool(pods - {uid}) for g, pods in self._gang_pods.items())

    def remember(self, pr: PodRequest, text: str | None, epoch: int | None = None) -> None:
        """Keep the request read from `text` (None: read from no spec text, never a hit for one)
        under the config of `epoch` (the one in force when the read began; default: now)."""
        old = self._pods.get(pr.uid)
        if old is not None and old.request.gang != pr.gang:
            self._unindex(pr.uid, old)
        self._uid_by_name[(pr.namespace, pr.name)] = pr.uid
        self._gang_pods.setdefault(pr.gang, set()).add(pr.uid)
        cached = _Cached(pr, _text_key(text), self.epoch if epoch is None else epoch)
        for uid, gone in self._pods.put(pr.uid, cached, _cost(pr)):
            self._unindex(uid, gone)

    def forget(self, uid: str) -> None:
        old = self._pods.pop(uid)
        if old is not None:
            self._unindex(uid, old)

    def _unindex(self, uid: str, old: _Cached) -> None:
        if self._uid_by_name.get((old.request.namespace, old.request.name)) == uid:
            del self._uid_by_name[(old.request.namespace, old.request.name)]
        pods = self._gang_pods.get(old.request.gang)
        if pods is not None:
            pods.discard(uid)
            if not pods:
                del self._gang_pods[old.request.gang]
