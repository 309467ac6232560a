"""Hostile tenants in the soak (`Options.hostile`, `--hostile`): namespaces that ask for more than
the admin allowed them, through the same kube-scheduler cycle, watches, restarts and faults.

The example cluster gets the entitlements a platform team would set (`defaultEntitlement:
opportunistic`; `vision-lab` may use VC vision up to priority 100), and the mix gains:

- **jobs of other tenants under live gang names**: `intruder` (no entry: opportunistic pods only)
  and `vision-lab` submit spec gangs, FrameworkController tasks (with a spec, or shaped by a
  Framework object they do not have) and GPU pods named after a live job of vision, nlp or research
  (same gang name; for task pods the victim's framework namespace, name and attempt in their
  annotations), naming any VC, at priorities -1..1000, some with
  `promoteWhenQuota`, some with a PriorityClass of value 1000 and no priority of their own;
- **requests edited in place**: a live member's scheduling spec (annotations are mutable while the
  pod is pending, reserved or bound) rewritten to another VC, the top priority, or another gang's
  name; a spec-less pod's VC label, or its PodGroup label, changed the same way.

- **a hoarder**: `intruder` gangs of which only the first pod is ever created, each reserving
  the whole gang for GPUs no pod claims, under ever new names, against its `maxReservedGpus`;

- **the admin editing the entitlements while all this runs**: the config file is rewritten to one of
  `RULES` (the first again, `vision-lab`'s ceiling lowered, its VC taken away, both tenants given
  more, `defaultEntitlement: none`, which leaves `intruder` nothing) and the extender's own watcher
  applies it, restarts read it too.

The oracle is written here from the README's rules ("Multi-tenancy"), not read from
`extender.gangs.entitlement`: after every operation, every gang the core holds is one its
namespace may hold (quota, or promotion into it, only in the namespace's VCs; no priority above its
ceiling), under the rules in force when it was given them (`Judge`: first seen, and for its VC's
quota, when it began to hold it), no gang of `intruder` placed past its bound on GPUs reserved and
not yet bound, every gang ledger record lists only pods of its gang's namespace,
and `checks.core_vs_api` already holds every pod to a gang of its own namespace.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from extender.conventions.common import VIRTUAL_CLUSTER
from extender.gangs.identity import split_key
from extender.gangs.ledger import GangLedger
from tests.soak.jobs import GANG_SHAPES, SPEC, VCS, Job
from topology.core import Core
from topology.reservations import Gang

LAB, INTRUDER = "vision-lab", "intruder"
OTHERS = (INTRUDER, LAB)  # the tenants the mix adds
POD_GROUP = "scheduling.x-k8s.io/pod-group"  # the coscheduling label the soak's PodGroup jobs carry
LAB_CEILING = 100
CLASS_VALUE = 1000  # the PriorityClass a hostile pod names (its value, as admission puts it in spec.priority)
Rights = dict[str, tuple[frozenset[str], int]]  # namespace -> (the VCs it may use, its ceiling)
# the `tenants` entries the admin switches between (the first is the soak's config at its start)
NOTHING = -2  # a ceiling below every priority: the namespace may hold no gang at all
# the entitlements the admin switches between, (defaultEntitlement, tenants); the first is the start's
RULES: tuple[tuple[str, Rights], ...] = (
    ("opportunistic", {LAB: (frozenset(["vision"]), LAB_CEILING)}),
    ("opportunistic", {LAB: (frozenset(["vision"]), 50)}),  # its ceiling lowered
    ("opportunistic", {LAB: (frozenset(), -1)}),  # its VC taken away: opportunistic pods only
    ("opportunistic", {LAB: (frozenset(["vision", "nlp"]), 1000), INTRUDER: (frozenset(["research"]), 10)}),
    ("none", {LAB: (frozenset(["vision"]), LAB_CEILING)}),  # unlisted namespaces may run nothing
)


# `intruder`'s bound on GPUs reserved and not yet bound (`maxReservedGpus`) under each of `RULES`
# (None: none, so both ways are soaked): read and reloaded with the rest. Its hoarders
# (`hoarding_job`) reach it; `Judge._past_bound` holds every gang placed to it. Under the last rules
# the intruder may run nothing, so that bound is never reached
INTRUDER_BOUND: tuple[int | None, ...] = (8, 8, None, 8, 4)


def may_use(rules: int) -> Rights:
    """What each namespace may hold under `RULES[rules]`, as the README states the rules."""
    mode, tenants = RULES[rules]
    return {
        **{vc: (frozenset([vc]), 1000) for vc in VCS},  # namespaceVirtualClusters: its VC, every priority
        # no entry: opportunistic pods only (defaultEntitlement opportunistic), or nothing (none)
        INTRUDER: (frozenset(), -1 if mode == "opportunistic" else NOTHING),
        **tenants,
    }


def config_text(base: str, rules: int) -> str:
    """The config file `base` (whose `topogang:` section is last) with `RULES[rules]` as its
    entitlements: what a platform team that keeps tenants apart sets."""
    mode, tenants = RULES[rules]
    lines = [f"  defaultEntitlement: {mode}", "  tenants:"]
    bound = INTRUDER_BOUND[rules]
    entries = {**({INTRUDER: (frozenset(), -1)} if bound is not None and mode != "none" else {}), **tenants}
    for ns, (vcs, ceiling) in sorted(entries.items()):
        extra = f", maxReservedGpus: {bound}" if ns == INTRUDER and bound is not None else ""
        lines.append(
            f"    {ns}: {{virtualClusters: [{', '.join(sorted(vcs))}], maxPriority: {ceiling}{extra}}}"
        )
    return base + "\n".join(lines) + "\n"


def unbound_gpus(core: Core, namespace: str) -> int:
    """GPUs the namespace's gangs hold in slots no pod is bound to, counted from the gangs."""
    return sum(
        s.leaf_number
        for g in core.gangs()
        if split_key(g.name)[0] == namespace
        for s in g.slots
        if s.pod_uid is None and not s.finished and not s.released_early
    )


# what the extender says when it refuses a pod for its entitlement (counted apart in the outcomes)
REFUSALS = ("may run only opportunistic", "may not use", "may ask for priority at most", "may use no VC")


def not_entitled(error: str) -> bool:
    return any(r in error for r in REFUSALS)


@dataclass
class HostileJob(Job):
    """A job of another tenant: its pods as `Job` writes them, then what the tenant chose to forge."""

    vc: str = "vision"
    forged_framework: str | None = None  # the framework namespace its task annotations claim

    def pod(self, index: int) -> dict[str, Any]:
        doc = super().pod(index)
        meta = doc["metadata"]
        ann = meta["annotations"]
        if SPEC in ann:
            wanted = json.loads(ann[SPEC])
            wanted["virtualCluster"] = self.vc
            ann[SPEC] = json.dumps(wanted, sort_keys=True)
        else:
            meta["labels"][VIRTUAL_CLUSTER] = self.vc
        if self.forged_framework is not None and "FC_FRAMEWORK_NAMESPACE" in ann:
            ann["FC_FRAMEWORK_NAMESPACE"] = self.forged_framework
        return doc


# what a hoarder's gangs look like: (pods, GPUs each), each within the intruder's tightest bound
# (a gang larger than the bound by itself is refused outright, and would hold nothing back)
HOARD_SHAPES = ((2, 2), (2, 4), (3, 2), (2, 1))
NEVER = float("inf")  # a member `late` until then is never created


def hoarding_job(rng: random.Random, serial: int) -> HostileJob:
    """A gang of `intruder` of which only the first pod is ever created: its filter reserves the
    whole gang, and the members that would claim the rest never come, so it holds GPUs no pod is
    bound to until its TTL ends, and again each time its controller re-creates the pod. Several at
    once are what `maxReservedGpus` bounds (`INTRUDER_BOUND`; `Judge._past_bound` checks it)."""
    size, gpus = rng.choice(HOARD_SHAPES)
    vc = rng.choice(("research", "research", "vision"))  # research: its quota under `RULES[3]`
    priority = rng.choice((-1, -1, -1, 10))  # opportunistic: what every rule but the last lets it run
    job = HostileJob(f"hoard-{serial}", "gang", INTRUDER, size, gpus, priority, {}, vc=vc)
    job.late = dict.fromkeys(range(1, size), NEVER)
    return job


def hostile_job(rng: random.Random, serial: int, others: Sequence[Job]) -> HostileJob:
    """A job of `intruder` or `vision-lab`, most often under the gang name of a live job of another
    namespace (`others`), with the VC and priority it should not have, about half the time; one in
    three is a hoarder (`hoarding_job`)."""
    if rng.random() < 0.35:
        return hoarding_job(rng, serial)
    ns = rng.choice(OTHERS)
    kind = rng.choices(("gang", "single", "fc", "fcfw", "gpu"), weights=(4, 3, 2, 1, 1))[0]
    target = rng.choice(others) if others and rng.random() < 0.7 else None
    vc = rng.choice(VCS)
    priority = rng.choice((-1, -1, -1, 0, LAB_CEILING, 500, 1000))
    if kind in ("single", "gpu"):
        size, gpus = 1, rng.choice((1, 2, 4))
    else:
        size, gpus = rng.choice(GANG_SHAPES[vc])
    extra: dict[str, Any] = {"promoteWhenQuota": True} if rng.random() < 0.2 else {}
    job = HostileJob(
        target.name if target is not None else f"{kind}-{serial}",
        kind,
        ns,
        size,
        gpus,
        priority if kind != "gpu" else 0,
        extra,
        vc=vc,
        class_value=CLASS_VALUE if rng.random() < 0.3 else None,
        asks_priority=rng.random() < 0.8,
    )
    if kind in ("fc", "fcfw") and target is not None:  # fcfw: the shape from the victim's Framework
        job.attempt = target.attempt  # the victim's attempt UID too, as far as annotations go
        job.forged_framework = target.namespace
    return job


def with_class(rng: random.Random, job: Job) -> Job:
    """A tenant's own job as a platform team's tenants often write it: about a third carry a
    PriorityClass of their job's priority (0 for an opportunistic one), half of those naming no
    priority of their own, so the class's holds (and must hold across restarts too)."""
    if rng.random() < 0.3:
        job.class_value = max(job.priority, 0)
        job.asks_priority = job.priority < 0 or rng.random() < 0.5
    return job


def edit(rng: random.Random, pod: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The merge patch of a tenant rewriting its live pod's request in place: the scheduling spec
    (`edited_spec`), else the conventions' labels (another VC; a PodGroup member, another group)."""
    meta = pod["metadata"]
    text = (meta.get("annotations") or {}).get(SPEC)
    if text is not None:
        return {"metadata": {"annotations": {SPEC: edited_spec(rng, text, names)}}}
    labels = meta.get("labels") or {}
    if POD_GROUP in labels and names and rng.random() < 0.5:
        return {"metadata": {"labels": {POD_GROUP: rng.choice(names)}}}
    return {"metadata": {"labels": {VIRTUAL_CLUSTER: rng.choice(VCS)}}}


def edited_spec(rng: random.Random, text: str, names: Sequence[str]) -> str:
    """The scheduling spec `text` as a tenant rewrites it in place: another VC, the top priority,
    or another gang's name (one of `names`)."""
    doc = json.loads(text)
    what = rng.choice(("vc", "priority", "gang") if "affinityGroup" in doc and names else ("vc", "priority"))
    if what == "vc":
        doc["virtualCluster"] = rng.choice([vc for vc in VCS if vc != doc.get("virtualCluster")])
    elif what == "priority":
        doc["priority"] = 1000
    else:
        doc["affinityGroup"]["name"] = rng.choice(names)
    return json.dumps(doc, sort_keys=True)


class Judge:
    """The entitlement oracle across reloads: a gang is held to the rules in force when it was first
    seen (what it was given), and for its VC's quota to the rules in force when it began to hold
    that quota (a promotion later is a new grant). A restart, and a reload (a core rebuilt around
    the running gangs), give gangs new ids: the first check after either finds them by name."""

    def __init__(self) -> None:
        self.rules = 0
        self.given: dict[int, tuple[str, int, int | None]] = {}  # gang id -> (name, rules, quota's)
        self.carried: dict[str, tuple[int, int | None]] = {}  # by name, across a restart

    def renumbered(self) -> None:
        # merged: a second renumbering before any check (a restart refused at the start, then
        # started again) must not drop what the first one carried
        self.carried = {
            **self.carried,
            **{name: (rules, quota) for name, rules, quota in self.given.values()},
        }
        self.given = {}

    def violations(self, core: Core) -> list[str]:
        """Every gang the core holds that its namespace may not hold (see the module docstring)."""
        out = []
        given: dict[int, tuple[str, int, int | None]] = {}
        by_name = {**{name: (rules, quota) for name, rules, quota in self.given.values()}, **self.carried}
        evicted = {_base(name): known for name, known in by_name.items() if name != _base(name)}
        for g in core.gangs():
            holds = g.priority >= 0
            if g.id in self.given:
                _, rules, quota = self.given[g.id]
            else:  # renumbered, or let go and still running (`<gang>/evicted/<n>`): what it was given
                known = by_name.get(g.name)
                out += self._past_bound(core, g, known is None and g.name == _base(g.name))
                if known is None and g.name != _base(g.name):
                    known = evicted.get(_base(g.name)) or by_name.get(_base(g.name))
                rules, quota = known or (self.rules, self.rules if holds else None)
            if holds and quota is None:
                quota = self.rules
            given[g.id] = (g.name, rules, quota)
            out += _beyond(g, may_use(rules), may_use(quota if quota is not None else rules))
        self.given, self.carried = given, {}
        return out

    def _past_bound(self, core: Core, g: Gang, new: bool) -> list[str]:
        """A gang placed just now (not renumbered, not adopted) of a namespace with a bound on GPUs
        reserved and not yet bound: the namespace's such GPUs, its own included, within the bound."""
        bound = INTRUDER_BOUND[self.rules]
        if not new or bound is None or split_key(g.name)[0] != INTRUDER or RULES[self.rules][0] == "none":
            return []
        held = unbound_gpus(core, INTRUDER)
        return (
            [f"gang {g.name} placed; {INTRUDER} holds {held} GPUs unbound, past its bound {bound}"]
            if held > bound
            else []
        )


def _base(gang: str) -> str:
    """The gang an evicted placement was let go from (`<gang>/evicted/<n>`, `.../recovered-<k>`)."""
    return gang.split("/evicted/")[0]


def _beyond(g: Gang, rights: Rights, quota_rights: Rights) -> list[str]:
    """What gang `g` holds beyond `rights` (its priority) and `quota_rights` (its VC's quota)."""
    out = []
    ns = split_key(g.name)[0]
    vcs = quota_rights.get(ns, (frozenset(), -1))[0]
    ceiling = rights.get(ns, (frozenset(), -1))[1]
    priority = max(g.priority, g.request.priority)
    takes_quota = priority >= 0 or g.request.promote_when_quota
    if takes_quota and g.request.vc not in vcs:
        out.append(
            f"gang {g.name} holds VC {g.request.vc}'s quota (priority {priority}, promoteWhenQuota "
            f"{g.request.promote_when_quota}); namespace {ns} may use {sorted(vcs) or 'no VC'}"
        )
    if ceiling == NOTHING:
        out.append(f"gang {g.name} runs; namespace {ns} may run nothing")
    elif priority > ceiling:
        out.append(f"gang {g.name} runs at priority {priority}; namespace {ns} may ask for at most {ceiling}")
    return out


def ledger_violations(ledger: GangLedger) -> list[str]:
    """Every gang ledger record that names or lists a pod of another namespace than its gang's:
    what a gang's barrier and its members read (`/v1/gangs/{namespace}/{name}`) is theirs alone."""
    out = []
    for gang, rec in ledger.records.items():
        ns = split_key(gang)[0]
        if rec.ident.namespace != ns:
            out.append(f"ledger record of gang {gang} is of namespace {rec.ident.namespace}")
        for uid in sorted(rec.pods):
            facts = ledger.pods.get(uid)
            if facts is not None and facts.namespace != ns:
                out.append(f"ledger record of gang {gang} lists pod {facts.namespace}/{facts.name}")
    return out
