"""The conventions at the edge: reading PodGroups, elastic extras, and Soft/Hard timeouts.

One `Conventions` per `Scheduler`, given to it when it is made (the default reads no API objects, as
in standalone mode). `Conventions.request_of` is the hook `Scheduler.request_of` calls for pods
without a topogang/HiveD spec. The scheduler is seen here only as a `Host` (what the conventions
read and lock), so this module does not import the verbs that import it:

- **Elastic gangs.** The core reserves the gang's core (minMember pods) all-or-nothing. A member that
  arrives when every slot of its shape is claimed is an *extra*: a one-pod gang `<gang>/extra/<pod>`
  whose placement is narrowed to the core's topology domain (the nodes under the lowest cell above
  node level that holds the whole core). It waits while that domain has no room, and it never
  touches the core's cells: the core stays as placed.
- **Hard timeout** (default): the reservation expires after the group's timeout (`Core.expire`),
  members already bound are evicted, and the gang is placed again at its next filter.
- **Soft timeout** (YuniKorn's default): after the timeout the reservation shrinks to the members
  already bound (re-adopted as a smaller gang, nothing evicted), and the remaining members run as
  ordinary one-pod gangs `<gang>/solo/<pod>`, still topology-aware.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol
from urllib.parse import quote

from extender.conventions import workload
from extender.conventions.common import ObjRef
from extender.conventions.resolve import Resolved, applies, references, resolve
from extender.gangs.podspec import PodRequest
from extender.ops.background import every
from topology.core import Core
from topology.decisions import AdoptedPod, GangRequest, Member, Released, UserError
from topology.reservations import Gang, GangPhase

log = logging.getLogger("topogang.conventions")


class AskingPod(Protocol):
    """The pod a verb names, as the conventions need it (`extender.http.wire.WirePod` is one): its
    identity and the raw object. A protocol, so the conventions sit below the routes that call them."""

    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def raw(self) -> Mapping[str, Any]: ...


Fetch = Callable[[ObjRef], Awaitable[Mapping[str, Any] | None]]
OBJECT_TTL = 30.0  # a PodGroup read is reused this long
MISSING_TTL = 5.0  # an unreadable one is asked again this soon
SOFTENED_FOR = 3600.0  # how long a softened gang's late members still run as ordinary pods
MAX_TRACKED = 100_000
EXTRA, SOLO = "extra", "solo"  # the one-pod gangs derived from a gang: `<gang>/extra/<pod>`, `.../solo/...`

PATHS = {
    "coscheduling": ("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}",),
    "volcano": ("/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/{name}",),
    "workload": ("/apis/scheduling.k8s.io/v1alpha1/namespaces/{ns}/workloads/{name}",),
    # Kubernetes 1.37 serves PodGroups as v1beta1, 1.36 as v1alpha2: the first that answers is read
    "podgroup": tuple(f"/apis/{v}/namespaces/{{ns}}/podgroups/{{name}}" for v in workload.PODGROUP_VERSIONS),
    "pod": ("/api/v1/namespaces/{ns}/pods/{name}",),
}


class Host(Protocol):
    """What the conventions need of the scheduler that owns them (`extender.http.verbs.Scheduler`)."""

    @property
    def core(self) -> Core: ...
    @property
    def lock(self) -> asyncio.Lock: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def namespace_vcs(self) -> Mapping[str, str]: ...
    @property
    def ttl_seconds(self) -> float: ...
    async def expire(self) -> list[Released]: ...


def object_paths(ref: ObjRef) -> tuple[str, ...]:
    """Where the object may be, in the order to ask (one path per API version that may serve it)."""
    ns, name = quote(ref.namespace, safe=""), quote(ref.name, safe="")
    return tuple(p.format(ns=ns, name=name) for p in PATHS[ref.kind])


def object_path(ref: ObjRef) -> str:
    return object_paths(ref)[0]


class Conventions:
    """Per-scheduler state of the conventions: cached API objects and the gangs' timeouts."""

    def __init__(self, fetch: Fetch | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.fetch = fetch
        self.clock = clock
        # DRA mode: the GPUs a pod's ResourceClaims ask for (`extender.kube.dra.DraCatalog.claim_gpus`)
        self.claim_gpus: Callable[[Mapping[str, Any], str], Awaitable[int]] | None = None
        self._objects: dict[ObjRef, tuple[float, Mapping[str, Any] | None]] = {}
        self.soft: OrderedDict[str, float] = OrderedDict()  # gang -> timeout
        self.hard: OrderedDict[str, float] = OrderedDict()
        self.softened: OrderedDict[str, float] = OrderedDict()  # gang -> when
        self._recent: set[str] = set()  # gangs tracked since the last sweep
        self._swept = clock()

    # ------------------------------------------------------------------------------ objects
    async def objects(self, refs: list[ObjRef]) -> dict[ObjRef, Mapping[str, Any] | None]:
        if self.fetch is None:
            return {}
        out: dict[ObjRef, Mapping[str, Any] | None] = {}
        now = self.clock()
        for ref in refs:
            hit = self._objects.get(ref)
            if hit is not None and now - hit[0] < (OBJECT_TTL if hit[1] is not None else MISSING_TTL):
                out[ref] = hit[1]
                continue
            try:
                obj = await self.fetch(ref)
            except Exception as exc:  # unreadable: the annotation fallback, or a UserError naming it
                log.warning("cannot read %s %s/%s: %s", ref.kind, ref.namespace, ref.name, exc)
                obj = None
            if len(self._objects) > MAX_TRACKED:
                self._objects.clear()
            self._objects[ref] = (now, obj)
            out[ref] = obj
        return out

    # ------------------------------------------------------------------------------ requests
    async def request_of(self, s: Host, pod: AskingPod) -> PodRequest | None:
        raw = pod.raw
        if not applies(raw):
            return None
        objs = await self.objects(references(raw, pod.namespace))
        claimed = await self.claim_gpus(raw, pod.namespace) if self.claim_gpus is not None else 0
        r = resolve(
            raw,
            pod.uid,
            pod.namespace,
            pod.name,
            namespace_vcs=s.namespace_vcs,
            ttl_seconds=s.ttl_seconds,
            objects=objs,
            existing=lambda name: _request(s.core.gang(name)),
            claim_gpus=claimed,
        )
        if r is None:
            return None
        if r.topology_key is not None:
            _check_level(s.core, r)
        if r.elastic:  # a group's timeout; a pod scheduled on its own has the scheduler's TTL only
            _track(self.soft if r.soft else self.hard, r.request.gang, r.timeout)
            self._recent.add(r.request.gang)
        return self.place(s.core, r)

    def place(self, core: Core, r: Resolved) -> PodRequest:
        """The core member's request, an extra's, or (after a Soft timeout) an ordinary pod's."""
        pr = r.request
        g = core.gang(pr.gang)
        when = self.softened.get(pr.gang)
        if when is not None and self.clock() - when > SOFTENED_FOR:
            del self.softened[pr.gang]
            when = None
        if when is not None:
            if g is not None and g.slot_of(pr.uid) is not None:
                return replace(pr, request=g.request)  # a member bound before the timeout
            return _single(pr, SOLO, None)
        if g is None or not r.elastic or g.slot_of(pr.uid) is not None or g.pending:
            return pr
        if core.being_preempted(g.id) or core.open_slots(pr.gang, pr.leaf_number):
            return pr  # a member (one of a gang being preempted waits with it, not as an extra)
        return _single(pr, EXTRA, domain_nodes(core, g))

    # ------------------------------------------------------------------------------ timeouts
    async def tick(self, s: Host) -> None:
        """Soften Soft gangs past their timeout; expire Hard ones promptly."""
        expire = False
        async with s.lock:
            now = s.clock()
            core = s.core
            if now - self._swept >= OBJECT_TTL:
                self.sweep(core, now)
            for name, timeout in list(self.soft.items()):
                g = core.gang(name)
                if g is not None and g.phase is GangPhase.RESERVED and now - g.created >= timeout:
                    self.soften(core, g, now)
            for name in self.hard:
                g = core.gang(name)
                if g is not None and g.deadline is not None and g.deadline <= now:
                    expire = True
                    break
        if expire:
            await s.expire()

    def sweep(self, core: Core, now: float) -> None:
        """Forget what no longer matters, so memory and each tick's work follow the gangs placed
        now, not every gang ever seen: API objects past their TTL (read again when needed), the
        timeouts of gangs not placed and not filtered since the last sweep (a member's next filter
        tracks them again, before its gang is placed), Soft timeouts past SOFTENED_FOR."""
        self._swept = now
        self._objects = {r: hit for r, hit in self._objects.items() if now - hit[0] < OBJECT_TTL}
        for d in (self.soft, self.hard):
            for name in [n for n in d if n not in self._recent and core.gang(n) is None]:
                del d[name]
        for name in [n for n, t in self.softened.items() if now - t > SOFTENED_FOR]:
            del self.softened[name]
        self._recent.clear()

    def soften(self, core: Core, g: Gang, now: float) -> None:
        """The Soft timeout: keep only the bound members, as a smaller gang; the rest go solo."""
        if core.being_preempted(g.id):  # its running pods' GPUs would pass to the preemptor now
            return
        placement = core.placement_of(g)
        where = {p.slot: p for p in placement.pods}
        bound = [(sl, where[sl.index]) for sl in g.slots if sl.pod_uid is not None and not sl.finished]
        core.delete_gang(g.name)  # nothing is evicted: the bound members are adopted back at once
        if bound:
            counts: dict[int, int] = {}
            for sl, _ in bound:
                counts[sl.leaf_number] = counts.get(sl.leaf_number, 0) + 1
            req = replace(g.request, members=tuple(Member(n, k) for k, n in counts.items()), slot_keys=None)
            pods = [
                AdoptedPod(sl.pod_uid or "", p.node, p.gpu_indices, sl.pod_name, sl.key, p.cell_types)
                for sl, p in bound
            ]
            core.adopt(req, pods, now)
        self.soft.pop(g.name, None)
        _track(self.softened, g.name, now)
        log.info(
            "gang %s: Soft timeout with %d of %d members bound; the rest run as ordinary pods",
            g.name,
            len(bound),
            len(g.slots),
        )

    def left(self, core: Core, gang: str, known: Callable[[str], bool]) -> None:
        """A pod of `gang` is gone. Once no pod of a softened gang is left (none bound, none known
        under its name or its solo/extra gangs: `known`), the name is free again: a job re-created
        under it is a gang, not pods run alone for the rest of `SOFTENED_FOR`."""
        base = base_gang(gang)
        if base in self.softened and core.gang(base) is None and not known(base):
            del self.softened[base]

    async def run(self, s: Host, interval: float = 0.25) -> None:
        await every(interval, lambda: self.tick(s), "gang timeouts")


def _check_level(core: Core, r: Resolved) -> None:
    """A PodGroup's topology key that names no level of the cell hierarchy is the user's error, said
    in the PodGroup's words (the core's own check names only the level)."""
    try:
        core.validate(r.request.request)
    except UserError as err:
        if err.field != "withinLevel":
            raise
        raise UserError(
            f"PodGroup {r.request.request.name} {workload.TOPOLOGY_FIELD}[0].key",
            f"{r.topology_key!r} cannot be a required level here: {err.message}",
        ) from None


def _track(d: OrderedDict[str, float], key: str, value: float) -> None:
    d[key] = value
    d.move_to_end(key)
    while len(d) > MAX_TRACKED:
        d.popitem(last=False)


def _request(g: Gang | None) -> GangRequest | None:
    return g.request if g is not None else None


def _single(pr: PodRequest, kind: str, nodes: frozenset[str] | None) -> PodRequest:
    """The pod alone, in the one-pod gang `<gang>/<kind>/<pod>` derived from its convention's gang."""
    req = replace(
        pr.request,
        name=f"{pr.gang}/{kind}/{pr.name}",
        members=(Member(1, pr.leaf_number),),
        suggested_nodes=nodes,
        slot_keys=None,
    )
    return replace(pr, request=req)


def base_gang(name: str) -> str:
    """The convention's gang a derived one-pod gang (`_single`) stems from; any other name itself."""
    for kind in (EXTRA, SOLO):
        head, sep, _ = name.partition(f"/{kind}/")
        if sep:
            return head
    return name


def domain_nodes(core: Core, g: Gang) -> frozenset[str]:
    """The nodes of the gang's topology domain: under the lowest cell holding all its leaves, and
    at least one level above a node (a one-node core's extras may use the rest of its rack)."""
    return core.gang_domain(g)


def kube_fetch(request: Callable[[str, str], Awaitable[dict[str, Any] | None]]) -> Fetch:
    """Reads PodGroups, Workloads and Spark driver pods with `request(method, path)`."""

    async def fetch(ref: ObjRef) -> Mapping[str, Any] | None:
        for path in object_paths(ref):  # 404 is both "no such object" and "version not served"
            got = await request("GET", path)
            if got is not None:
                return got
        return None

    return fetch
