"""Pods whose annotations topogang cannot use, and the Event that tells them so.

Anyone who can create a pod writes its annotations, and can edit them later, bound or not. So the
Kubernetes mode reads every pod it lists or watches as untrusted: a pod whose scheduling spec (or,
once bound, whose bind info) cannot be read is skipped, never a reason for start-up, recovery or a
watch to stop. Skipping alone would leave its owner guessing why the pod stays Pending (or why its
allocation was not restored), so it gets a Warning Event naming the annotation, the place inside it
and the reason, which is what `kubectl describe pod` shows. The filter refuses the same pod with the
same words (`extender.http.answers.user_error`); every other pod keeps being scheduled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from config.untrusted import printable
from extender.gangs.bindinfo import BIND_INFO_ANNOTATIONS, decode_bind_info
from extender.gangs.podspec import MAX_PODS, SPEC_ANNOTATIONS, pod_request, spec_text
from extender.kube import pods as kpods
from topology.decisions import UserError

INVALID_SPEC = "InvalidSchedulingSpec"  # Event reason: the pod waits until its spec is fixed
INVALID_BIND_INFO = "InvalidBindInfo"  # Event reason: a bound pod's decision record is unreadable
MAX_DETAIL = 600  # characters of the path and reason an Event repeats (the Event keeps 1,024)


@dataclass(frozen=True, slots=True)
class Invalid:
    """Why one annotation of a pod cannot be used: the Event's reason, the annotation, the place
    inside it ("" for the whole text), what is wrong there, and whether the pod is bound already."""

    reason: str
    annotation: str
    path: str
    why: str
    bound: bool = False

    def message(self) -> str:
        at = f" at {self.path}" if self.path else ""
        detail = printable(f"{at}: {self.why}", MAX_DETAIL)
        if self.bound:
            tail = "topogang cannot restore the pod's allocation from it"
        else:
            tail = "topogang does not schedule this pod until the annotation is fixed"
        return f"annotation {self.annotation}{detail}; {tail}"


def fingerprint(pod: Mapping[str, Any]) -> int:
    """What `invalid` reads of a pod: its verdict changes only when this does (a pod's status
    changes far more often than its annotations, and a gang's bind info can be long)."""
    ann = kpods.pod_annotations(pod)
    texts = tuple(ann.get(k) for k in (*SPEC_ANNOTATIONS, *BIND_INFO_ANNOTATIONS))
    return hash((kpods.node_name(pod) is None, *(t if isinstance(t, str) else None for t in texts)))


def invalid(
    pod: Mapping[str, Any], *, namespace_vcs: Mapping[str, str] | None = None, max_pods: int = MAX_PODS
) -> Invalid | None:
    """Why topogang cannot use this opted-in pod's annotations, or None. A pending pod is judged by
    its scheduling spec (as the filter reads it, minus what only a Framework object can add), a
    bound one by its bind info (which recovery rebuilds its gang from), or by its spec when it has
    none (HiveD's isolation annotation alone); a pod without a spec (the conventions' PodGroups,
    YuniKorn, Spark) is the conventions' to judge, at filter time."""
    bound = kpods.node_name(pod) is not None
    if bound:
        ann = kpods.pod_annotations(pod)
        for key in BIND_INFO_ANNOTATIONS:
            text = ann.get(key)
            if isinstance(text, str) and text.strip():
                try:
                    decode_bind_info(text)
                except ValueError as err:
                    return Invalid(INVALID_BIND_INFO, key, "", str(err), bound)
                return None
    key, text = spec_text(pod)
    if text is None:
        return None
    try:
        uid, namespace, name = kpods.uid(pod), kpods.namespace(pod), kpods.name(pod)
        pod_request(pod, uid, namespace, name, namespace_vcs=namespace_vcs, max_pods=max_pods)
    except UserError as err:
        return Invalid(INVALID_SPEC, key, "" if err.field == key else err.field, err.message, bound)
    except ValueError as err:  # anything else the text provokes is still the text's fault
        return Invalid(INVALID_SPEC, key, "", str(err), bound)
    return None
