"""Who may ask for what: a pod's VC, pinned cell and priority, held to its namespace's entitlement.

Anyone who can create a pod writes its scheduling spec (and the conventions' VC label), so the VC and
the priority a pod names are requests, not facts. The admin says what each namespace may use
(`topogang.tenants` and `topogang.namespaceVirtualClusters`, `config.check_tenants` checks them); this
module holds every pod request to it, after the request is read and before the core is asked, so a
refused pod reserves nothing and preempts nobody. It is the one place the rule lives:

- **Priority comes from Kubernetes first.** A pod with `spec.priorityClassName` carries the class's
  value in `spec.priority` (the API server's admission sets it; admins restrict classes with RBAC and
  ResourceQuota scopes). The value maps into topogang's guaranteed range by clamping: below 0 counts
  as 0, above 1000 as 1000 (a class never makes a gang opportunistic by itself). With a class, that
  mapped value is the gang's priority and its ceiling: the spec's `priority` may lower it (to -1 too),
  a higher one is refused. Without a class, the spec's `priority` holds (HiveD's pods have none). A
  convention's gang (PodGroups, YuniKorn, Spark) takes the class's value; a Workload's PodGroup
  priority, when positive, may lower it.
- **The namespace's `maxPriority` caps.** A priority the pod asks for above it is refused; one topogang
  derives itself (from the class, a PodGroup) is capped to it.
- **The VC.** A guaranteed gang (priority >= 0, or opportunistic with `promoteWhenQuota`, which would
  take quota later) may use only the namespace's VCs: its `namespaceVirtualClusters` VC and its
  `tenants` entry's `virtualClusters`. `promoteWhenQuota` also asks for the priority promotion gives
  (0), so a namespace whose `maxPriority` is below it may not opt in: the promoted gang would be
  guaranteed past its cap. An opportunistic gang uses no quota and preempts nobody, so any VC may
  carry it, unless the namespace may run nothing at all.
- **Pinned cells** belong to a VC: a pod may pin only within its VCs, and only the cells its entry
  lists when it lists them (`pinnedCellIds`).
- **Namespaces without a `tenants` entry** follow the mode (`topogang.defaultEntitlement`, else `serve
  --default-entitlement`): `open` lets them use every VC at every priority (HiveD's trust, which left
  keeping tenants apart to OpenPAI's REST server); `opportunistic` gives them their
  `namespaceVirtualClusters` VC (every priority, its pinned cells), and a namespace without one may
  run priority -1 only; `none` refuses every pod of a namespace in neither map.
- **A reload judges what is asked from then on.** A gang already given its VC and priority keeps them
  (a restart brings it back the same, `grant`'s `held`); to take them back, delete its pods. A gang
  that opted in to promotion (`promoteWhenQuota`) whose namespace may no longer take its VC's quota
  (the VC, or a `maxPriority` of at least 0, taken away) is no longer promoted into it
  (`withdraw_promotions`): promotion would be a new grant.

Pods of one gang agree because the core refuses a member whose request differs from its gang's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from config.schema import ENTITLEMENT_MODES, TopogangModel
from extender.gangs.identity import split_key
from extender.gangs.podspec import PodRequest
from topology.asks import ReserveLimit
from topology.core import Core
from topology.decisions import MAX_PRIORITY, MIN_GUARANTEED_PRIORITY, OPPORTUNISTIC_PRIORITY, UserError
from topology.promotion import PROMOTED_PRIORITY

TENANTS = "topogang.tenants"
NAMESPACE_VCS = "topogang.namespaceVirtualClusters"
DEFAULT = "topogang.defaultEntitlement"
OPEN_WARNING = (
    "every namespace without a topogang.tenants entry may use every VC, every pinned cell and every "
    "priority (entitlement mode open); set topogang.defaultEntitlement (or serve --default-entitlement) "
    "to opportunistic or none to keep tenants apart"
)


class EntitlementError(UserError):
    """A pod asks for more than its namespace may use; the message names the config key to change."""


@dataclass(frozen=True, slots=True)
class Tenant:
    """What one namespace may use. `pinned` None: every pinned cell of its VCs."""

    vcs: frozenset[str]
    max_priority: int
    pinned: frozenset[str] | None
    key: str  # the config key that grants it, for messages
    opportunistic: bool = True  # may run priority -1 gangs in any VC
    max_reserved: int | None = None  # GPUs its gangs may hold unbound at once (`ReserveLimit`); None: any


@dataclass(frozen=True, slots=True)
class Entitlements:
    """The admin's entitlements, as the edge checks them (rebuilt on every config reload)."""

    tenants: Mapping[str, Tenant]
    namespace_vcs: Mapping[str, str]
    mode: str = "open"
    default_reserved: int | None = None  # `topogang.defaultMaxReservedGpus`

    @classmethod
    def open(cls, namespace_vcs: Mapping[str, str] | None = None) -> Entitlements:
        """HiveD's trust: every namespace may use everything (a config without entitlements)."""
        return cls({}, dict(namespace_vcs or {}))

    @classmethod
    def of(cls, extras: TopogangModel, flag: str = "open") -> Entitlements:
        """From the config's `topogang:` section; `flag` is the mode when the file sets none."""
        mode = extras.default_entitlement or flag
        if mode not in ENTITLEMENT_MODES:
            raise ValueError(f"default entitlement {mode!r}: expected one of {', '.join(ENTITLEMENT_MODES)}")
        nvcs = dict(extras.namespace_virtual_clusters)
        tenants: dict[str, Tenant] = {}
        for ns, t in extras.tenants.items():
            vcs = {*t.virtual_clusters, *([nvcs[ns]] if ns in nvcs else [])}
            pins = None if t.pinned_cell_ids is None else frozenset(t.pinned_cell_ids)
            tenants[ns] = Tenant(
                frozenset(vcs), t.max_priority, pins, f"{TENANTS}.{ns}", max_reserved=t.max_reserved_gpus
            )
        return cls(tenants, nvcs, mode, extras.default_max_reserved_gpus)

    def bounds(self) -> tuple[int | None, dict[str, int | None]]:
        """The bounds on reservations not yet filled (the default, each entry's): a reload that
        changes them may let a gang held by one go (`extender.http.reload`)."""
        return self.default_reserved, {ns: t.max_reserved for ns, t in self.tenants.items()}

    def reserve_limit(self, namespace: str) -> ReserveLimit | None:
        """The GPUs the namespace's gangs may hold unbound at once (`asks.ReserveLimit`), with the key
        that sets it; None: no limit. Read for every filter: a dict lookup when no limit is set."""
        tenant = self.tenants.get(namespace)
        if tenant is not None and tenant.max_reserved is not None:
            return ReserveLimit(namespace, tenant.max_reserved, f"{tenant.key}.maxReservedGpus")
        if self.default_reserved is None:
            return None
        return ReserveLimit(namespace, self.default_reserved, "topogang.defaultMaxReservedGpus")

    def tenant(self, namespace: str) -> Tenant | None:
        """The namespace's entitlement; None when it may use everything."""
        got = self.tenants.get(namespace)
        if got is not None or self.mode == "open":
            return got
        vc = self.namespace_vcs.get(namespace)
        if vc is not None:
            return Tenant(frozenset([vc]), MAX_PRIORITY, None, f"{NAMESPACE_VCS}.{namespace}")
        top = OPPORTUNISTIC_PRIORITY if self.mode == "opportunistic" else OPPORTUNISTIC_PRIORITY - 1
        return Tenant(frozenset(), top, frozenset(), f"{TENANTS}.{namespace}", self.mode == "opportunistic")


def map_priority(value: int) -> int:
    """A Kubernetes priority in topogang's guaranteed range (0..1000), by clamping."""
    return max(MIN_GUARANTEED_PRIORITY, min(MAX_PRIORITY, value))


def class_priority(pod: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """(PriorityClass name, its value, the mapped priority) when the pod names a class whose value
    the API server resolved into `spec.priority`; None otherwise (no class, or a pod that did not
    come through admission, whose `priority` then means nothing)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    name, value = spec.get("priorityClassName"), spec.get("priority")
    if not isinstance(name, str) or not name or not isinstance(value, int) or isinstance(value, bool):
        return None
    return name, value, map_priority(value)


def _priority(pr: PodRequest, pod: Mapping[str, Any], tenant: Tenant | None, held: int | None) -> int:
    asked = pr.request.priority
    if tenant is not None and held is not None and held > tenant.max_priority:
        tenant = replace(tenant, max_priority=held)
    explicit = pr.from_spec and pr.priority_asked
    pc = class_priority(pod)
    if pc is not None:
        name, value, ceiling = pc
        if explicit and asked > ceiling:
            raise EntitlementError(
                "priority",
                f"a pod of namespace {pr.namespace} asks for priority {asked} (VC {pr.request.vc!r}), "
                f"above its PriorityClass {name} (value {value}, topogang priority {ceiling}): the "
                "spec's priority may lower it, not raise it; use a higher PriorityClass the "
                "namespace may use (spec.priorityClassName)",
            )
        if not explicit:
            asked = min(asked, ceiling) if not pr.from_spec and asked > 0 else ceiling
    else:
        explicit = explicit or pr.from_spec
    if tenant is not None and asked > tenant.max_priority:
        if tenant.max_priority < MIN_GUARANTEED_PRIORITY:
            raise EntitlementError(
                "priority",
                f"namespace {pr.namespace} may run only opportunistic pods (priority -1), not VC "
                f"{pr.request.vc!r} at priority {asked}: list it under {tenant.key} (virtualClusters, "
                f"maxPriority) or in {NAMESPACE_VCS} to allow guaranteed ones",
            )
        if explicit:
            vc = pr.request.vc
            also = "" if vc in tenant.vcs else f" and add {vc!r} to {tenant.key}.virtualClusters"
            raise EntitlementError(
                "priority",
                f"namespace {pr.namespace} may ask for priority at most {tenant.max_priority}, not "
                f"{asked} (VC {vc!r}): raise {tenant.key}.maxPriority{also} to allow it",
            )
        asked = tenant.max_priority
    return asked


def grant(
    rules: Entitlements, pr: PodRequest, pod: Mapping[str, Any], *, held: int | None = None
) -> PodRequest:
    """The pod's request as its namespace may make it (its priority settled), or `EntitlementError`
    naming the namespace, what it asked for and the config key that would allow it. `held`: the
    priority topogang already gave the pod's gang (recovery reads it from the bind info); a
    `maxPriority` lowered since does not take it back, as it does not from a gang that runs on
    without a restart."""
    tenant = rules.tenant(pr.namespace)
    if not may_run(tenant):
        raise EntitlementError(
            "virtualCluster",
            f"namespace {pr.namespace} may use no VC ({DEFAULT} is {rules.mode}): add it to "
            f"{NAMESPACE_VCS} or {TENANTS}",
        )
    priority = _priority(pr, pod, tenant, held)
    req = pr.request
    if tenant is not None:
        vc = req.vc
        takes_quota = priority >= MIN_GUARANTEED_PRIORITY or req.promote_when_quota
        if vc not in tenant.vcs and (takes_quota or req.pinned_cell_id is not None):
            what = "a pinned cell of VC" if req.pinned_cell_id is not None else "VC"
            raise EntitlementError(
                "virtualCluster",
                f"namespace {pr.namespace} may not use {what} {vc!r} at priority {priority} "
                f"(it may use: {_names(tenant.vcs)}; opportunistic pods, priority -1, may use any): "
                f"add {vc!r} to {TENANTS}.{pr.namespace}.virtualClusters to allow it",
            )
        if req.promote_when_quota and not may_take_quota(tenant, vc):
            raise EntitlementError(
                "promoteWhenQuota",
                f"namespace {pr.namespace} may run only opportunistic pods (maxPriority "
                f"{tenant.max_priority}), and promoteWhenQuota asks for priority {PROMOTED_PRIORITY} in "
                f"the quota of VC {vc!r} once it has room: drop promoteWhenQuota, or raise "
                f"{tenant.key}.maxPriority to at least {PROMOTED_PRIORITY} to allow it",
            )
        pin = req.pinned_cell_id
        if pin is not None and tenant.pinned is not None and pin not in tenant.pinned:
            raise EntitlementError(
                "pinnedCellId",
                f"namespace {pr.namespace} may not use pinned cell {pin!r} (it may use: "
                f"{_names(tenant.pinned)}): add it to {TENANTS}.{pr.namespace}.pinnedCellIds to allow it",
            )
    if priority == req.priority:
        return pr
    return replace(pr, request=replace(req, priority=priority))


def may_run(tenant: Tenant | None) -> bool:
    """Whether a namespace with this entitlement may run any pod at all (`none` leaves some none)."""
    return tenant is None or tenant.opportunistic or bool(tenant.vcs)


def may_take_quota(tenant: Tenant | None, vc: str) -> bool:
    """Whether a namespace with this entitlement may have a gang take VC `vc`'s quota: the VC is one
    of its own and it may run a gang at the priority promotion gives (`PROMOTED_PRIORITY`). The one
    rule for a request that would take quota later (`promoteWhenQuota`), for a gang kept promotable
    after a reload, and for a wait that holds the VC's queue (`vc_order`)."""
    return tenant is None or (vc in tenant.vcs and tenant.max_priority >= PROMOTED_PRIORITY)


def withdraw_promotions(core: Core, rules: Entitlements) -> list[str]:
    """After a reload: the gangs that opted in to promotion whose namespace may no longer take their
    VC's quota (`may_take_quota`: the VC, or a `maxPriority` below the promoted priority, taken away)
    are not promoted into it (`Core.withdraw_promotion`). Their names."""
    out = []
    for g in core.gangs():
        if g.request.promote_when_quota:
            tenant = rules.tenant(split_key(g.name)[0])
            if not may_take_quota(tenant, g.request.vc) and core.withdraw_promotion(g.name):
                out.append(g.name)
    return out


def _names(items: frozenset[str]) -> str:
    return ", ".join(sorted(items)) or "none"


class Gate:
    """The scheduler's entitlements (swapped on a config reload) and who hears of a refusal (the
    Kubernetes mode writes a Warning Event on the pod)."""

    def __init__(self, rules: Entitlements, flag: str = "open") -> None:
        self.rules = rules
        self.flag = flag  # `serve --default-entitlement`: the mode when the config sets none
        self.on_refused: Callable[[PodRequest, EntitlementError], None] | None = None

    def configure(self, extras: TopogangModel, flag: str | None = None) -> None:
        """Take the (re)loaded config's entitlements; `flag` replaces the serve flag's mode."""
        if flag is not None:
            self.flag = flag
        self.rules = Entitlements.of(extras, self.flag)

    def check(self, pr: PodRequest, pod: Mapping[str, Any]) -> PodRequest:
        try:
            return grant(self.rules, pr, pod)
        except EntitlementError as err:
            if self.on_refused is not None:
                self.on_refused(pr, err)
            raise
