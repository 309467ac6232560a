"""Why topogang ends a pod that runs, in words for the admin and for the pod's own namespace.

A tenant's controller has to tell a pod that failed from one that was taken away: a batch/v1 Job's
`podFailurePolicy` (`onPodConditions: [{type: DisruptionTarget}]`, action `Ignore`) keeps a
preemption from counting against `backoffLimit`, and JobSet and the training operators read the same
condition. kube-scheduler marks its victims with it (reason `PreemptionByScheduler`) before it
deletes them; topogang, which deletes pods for its own reasons too, does the same with a reason per
cause (`extender.kube.sync.ClusterSync.evict`).

Who reads what: the condition and the Event land on the victim, readable by anyone who reads pods
in its namespace, so `message` names the preempting gang only when it is of that same namespace
(gang names are per namespace, `extender.gangs.identity`); the admin's log line (`detail`) always
names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.gangs.identity import split_key

PREEMPTED = "PreemptionByScheduler"  # kube-scheduler's reason: tools that know it keep working
RESERVATION_EXPIRED = "GangReservationExpired"
ATTEMPT_SUPERSEDED = "GangAttemptSuperseded"
GANG_NOT_WHOLE = "GangNotWhole"
OFF_PLACEMENT = "GangPlacementChanged"
OFF_PLACEMENT_WHY = "not part of its gang's placement any more: the cluster's config changed"
# the reasons only topogang gives: a new leader finishes the evictions marked with one of them
# (`extender.kube.eviction_retry.own_mark`); its preemptions carry kube-scheduler's own reason
OWN_REASONS = frozenset({RESERVATION_EXPIRED, ATTEMPT_SUPERSEDED, GANG_NOT_WHOLE, OFF_PLACEMENT})
MARK_PREFIX = "topogang: "  # how every message topogang marks a pod with begins (`Disruption.message`)


@dataclass(frozen=True, slots=True)
class Disruption:
    reason: str  # the DisruptionTarget condition's reason, CamelCase as the API expects
    why: str  # what the victim's namespace reads, naming nothing of another namespace
    by: str = ""  # the key of the gang it is ended for (the preemptor), or of its own gang

    @property
    def preemption(self) -> bool:
        return self.reason == PREEMPTED

    def message(self, victim_namespace: str) -> str:
        """The condition's and the Event's text for a pod of `victim_namespace`."""
        ns, name = split_key(self.by)
        if self.by and ns == victim_namespace:
            return f"{MARK_PREFIX}{self.why} ({name})"
        return f"{MARK_PREFIX}{self.why}"

    @property
    def detail(self) -> str:
        """The admin's log line: the preempting gang by its full key."""
        return f"{self.why} ({self.by})" if self.by else self.why


def preempted_by(gang: str) -> Disruption:
    return Disruption(PREEMPTED, "preempting to accommodate a higher priority pod group", gang)


def reservation_expired() -> Disruption:
    return Disruption(
        RESERVATION_EXPIRED, "its gang's reservation expired before all of the gang's members arrived"
    )


def superseded(new_attempt: str) -> Disruption:
    """`new_attempt`: the same Framework's newer attempt (the gang key of the pod's own namespace)."""
    return Disruption(ATTEMPT_SUPERSEDED, "a newer attempt of its framework superseded its gang", new_attempt)


def not_whole(gang: str) -> Disruption:
    """`gang`: the pod's own gang."""
    return Disruption(GANG_NOT_WHOLE, "a member of its gang went, so the gang is not whole", gang)


def off_placement(why: str) -> Disruption:
    """A config change took the pod's place out of its gang's placement; `why` says how."""
    return Disruption(OFF_PLACEMENT, why)
