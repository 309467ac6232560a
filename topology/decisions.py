"""Requests into the core and decisions out of it, as immutable values.

Every "no" carries a machine-readable reason (which VC, chain and level, how many cells are needed and
how many are free) because users of a gang scheduler mostly ask one question: why is my job waiting?
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

OPPORTUNISTIC_PRIORITY = -1
MIN_GUARANTEED_PRIORITY = 0
MAX_PRIORITY = 1000


@dataclass(frozen=True, slots=True)
class Member:
    """`podNumber` pods that each need `leafNumber` leaf cells (GPUs) — HiveD's affinity-group member."""

    pod_number: int
    leaf_number: int


@dataclass(frozen=True, slots=True)
class GangRequest:
    """What a gang asks for. Every member pod of a gang carries the same request (HiveD's rule).

    `name` is the gang's key, opaque to the core. The edge makes it `<namespace>/<name>` with the
    pod's own namespace (`extender.gangs.identity`), so gangs of two namespaces never share a key.

    `slot_keys`, when given, names each pod slot in rank order (e.g. FrameworkController's
    `role/index`), so a retried pod takes back exactly its own slot and rank neighbours are placed as
    topology neighbours."""

    name: str
    vc: str
    members: tuple[Member, ...]
    priority: int = 0
    leaf_type: str | None = None
    pinned_cell_id: str | None = None
    lazy_preemption: bool = False
    gang_release: bool = False
    suggested_nodes: frozenset[str] | None = None
    ttl_seconds: float = 300.0
    slot_keys: tuple[str, ...] | None = None
    # The whole gang under one cell of this level (a cell type, or its last word: "rack" names
    # A100-RACK; "node" and "hostname" name the node level), or it waits: a required topology
    # level such as a Kubernetes PodGroup's topology key. None: anywhere, best fit first.
    within_level: str | None = None
    # An opportunistic gang that becomes guaranteed where it runs once its VC has quota for it
    # (`topology/promotion.py`); off by default, as HiveD never promotes.
    promote_when_quota: bool = False

    @property
    def pod_count(self) -> int:
        return sum(m.pod_number for m in self.members)

    @property
    def leaf_total(self) -> int:
        return sum(m.pod_number * m.leaf_number for m in self.members)

    @property
    def opportunistic(self) -> bool:
        return self.priority < MIN_GUARANTEED_PRIORITY


class WaitCode(StrEnum):
    INSUFFICIENT_QUOTA = "InsufficientQuota"  # the VC's cells cannot hold the gang
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"  # the physical cluster is too full
    NO_SUGGESTED_NODE = "NoSuggestedNode"  # kube-scheduler's filters left no usable node
    BAD_HARDWARE = "BadHardware"  # only bad cells would fit
    RESERVED = "Reserved"  # all candidate slots of the gang are claimed
    PREEMPTIBLE = "Preemptible"  # it would fit by preempting the listed victims (see `Wait.victims`)
    PREEMPTING = "Preempting"  # cells are reserved for it; waiting for the victims to go
    EXPIRED = "Expired"  # its reservation expired before it was whole; placed again one TTL later
    QUEUED = "Queued"  # an older gang of its VC waits for room, and a VC's gangs start in order
    # its namespace's gangs hold as many GPUs in slots no pod has claimed as the admin allows
    TENANT_LIMIT = "TenantLimit"
    # never the core's answer: the edge's note of a gang pending when it took the lead, not yet
    # filtered since (`extender.kube.pending`)
    UNASKED = "Unasked"


@dataclass(frozen=True, slots=True)
class WaitReason:
    """Why a gang cannot be placed now. `level` is the cell level that came up short."""

    code: WaitCode
    vc: str
    message: str
    chain: str | None = None
    level: int | None = None
    cell_type: str | None = None
    needed: int | None = None
    available: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.code.value,
            "vc": self.vc,
            "chain": self.chain,
            "level": self.level,
            "cellType": self.cell_type,
            "needed": self.needed,
            "available": self.available,
            "message": self.message,
        }


class UserError(ValueError):
    """A request that can never succeed as written; `field` names the offending input."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """One pod slot of a placed gang: its node and GPU indices (as `nvidia-smi` numbers them)."""

    slot: int
    node: str
    gpu_indices: tuple[int, ...]
    key: str | None = None
    # per GPU, the type of the VC quota cell it was bound through ("" when opportunistic): what
    # recovery needs to rebind the same cells (HiveD's preassignedCellTypes)
    cell_types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """The whole gang's placement, decided when its first member was filtered.

    `priority` is the one the gang runs at: -1 once a lazy preemption (or a recovery that found its
    cells taken) downgraded it. `requested_priority` is its request's, which every member still
    carries: the bind info records it, so that a restart rebuilds the request its pending members
    match; that the gang runs downgraded is told by its pods' empty `cell_types`."""

    gang: str
    vc: str
    chain: str
    priority: int
    requested_priority: int
    pods: tuple[PodPlacement, ...]
    lca_level: int
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Bind:
    """Decision: bind this pod to `node` with these GPUs; `placement` is the gang's bind info."""

    pod_uid: str
    slot: int
    node: str
    gpu_indices: tuple[int, ...]
    placement: GangPlacement


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod that must go so a higher-priority gang can have its cells; victims come in whole gangs."""

    pod_uid: str
    gang: str
    node: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Decision: the pod (and its gang) waits. With code PREEMPTIBLE, `victims` lists whom the
    gang would preempt (the filter phase reports them but reserves nothing)."""

    reason: WaitReason
    victims: tuple[Victim, ...] = ()

    def victims_by_node(self) -> dict[str, tuple[str, ...]]:
        return _by_node(self.victims)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Decision of the preempt phase: cells are now reserved for `gang`; these pods must go."""

    gang: str
    victims: tuple[Victim, ...]

    def victims_by_node(self) -> dict[str, tuple[str, ...]]:
        return _by_node(self.victims)


def _by_node(victims: tuple[Victim, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for v in victims:
        out.setdefault(v.node, []).append(v.pod_uid)
    return {node: tuple(uids) for node, uids in sorted(out.items())}


@dataclass(frozen=True, slots=True)
class AdoptedPod:
    """A pod found already bound (recovery after restart, or reconfiguration): where it runs."""

    pod_uid: str  # "" for a slot of the gang that no pod holds
    node: str
    gpu_indices: tuple[int, ...]
    pod_name: str | None = None
    slot_key: str | None = None
    cell_types: tuple[str, ...] = ()  # per GPU, as `PodPlacement.cell_types` recorded it


def held_no_quota(records: Iterable[tuple[Sequence[int], Sequence[str]]]) -> bool:
    """Records of (GPU indices, quota cell type per GPU) say every GPU was held through no quota
    cell: a type recorded for each GPU, all empty. The gang ran or waited as opportunistic (possibly
    downgraded by a lazy preemption) and comes back that way. No records, or records without types
    (older annotations), say nothing either way."""
    seen = False
    for gpus, types in records:
        if not types or len(types) != len(gpus) or any(types):
            return False
        seen = True
    return seen


Decision = Bind | Wait


@dataclass(frozen=True, slots=True)
class Released:
    """What a release or expiry freed: pods still bound to freed cells must be evicted by the edge."""

    gang: str
    reason: str
    evict_pod_uids: tuple[str, ...] = field(default=())
