"""Ending a running pod the way kube-scheduler ends a preemption victim: mark it, then delete it.

The mark is a true `DisruptionTarget` condition with the cause as its reason
(`extender.gangs.disruption`), written to the pod's status before the deletion, so whatever owns
the pod (a Job's `podFailurePolicy`, JobSet, a training operator) sees a disruption and not a
failure of the pod's own. It is best effort: a pod whose status cannot be written (an older RBAC
without `pods/status` patch, a pod already going) is deleted all the same, since a gang waits for
its GPUs; the log says why it has no mark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from config.untrusted import printable
from extender.gangs.disruption import Disruption
from extender.gangs.ledger_records import rfc3339
from extender.kube import pods as kpods
from extender.kube.client import ApiError, AsyncKube, pod_path
from extender.kube.events import MAX_MESSAGE

log = logging.getLogger("topogang.kube")


MARKED, UNMARKED, NOT_DELETED = "marked", "unmarked", "not deleted"  # `topogang_evictions` outcomes
# not deleted, for a reason that may pass (429, 5xx, no answer): counted as NOT_DELETED, tried again
FAILED = "failed"


async def evict_pod(
    kube: AsyncKube, uid: str, namespace: str, name: str, why: Disruption, watched: Mapping[str, Any] | None
) -> str:
    """Mark and delete pod `namespace/name` if it still is `uid`; `watched`: the copy the watch
    brought, if any. The outcome: deleted with the mark, deleted without it, not deleted (gone or
    replaced already: 404, 409), or failed (refused otherwise, or no answer: worth another try,
    `extender.kube.eviction_retry`)."""
    log.info("evicting pod %s/%s (%s): %s [%s]", namespace, name, uid, why.detail, why.reason)
    marked = await _mark(kube, uid, namespace, name, why, watched)
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    try:
        await kube.request("DELETE", pod_path(namespace, name), body=body)
    except ApiError as err:
        if err.status in (404, 409):  # gone, or a new pod under the name (the UID precondition)
            return NOT_DELETED
        log.warning("evicting pod %s/%s failed: %s", namespace, name, err)
        return FAILED
    except Exception as exc:  # no answer (a timeout, a cut connection): the next pod is still evicted
        log.warning("evicting pod %s/%s: no answer (%s); it may be going", namespace, name, exc)
        return FAILED
    return MARKED if marked else UNMARKED


async def _mark(
    kube: AsyncKube, uid: str, namespace: str, name: str, why: Disruption, pod: Mapping[str, Any] | None
) -> bool:
    """Write the condition; read the pod again once if the copy at hand is stale (409). True: the
    pod carries a mark now (this one, or one given before)."""
    path = pod_path(namespace, name)
    text = printable(why.message(namespace), MAX_MESSAGE)  # a gang name is the tenant's text
    stamp = rfc3339(time.time())
    for fresh in (False, True):
        if pod is None or fresh:
            try:
                pod = await kube.request("GET", path)
            except Exception as exc:  # an API error, or no answer: the deletion goes on unmarked
                log.warning("cannot mark pod %s/%s as disrupted: reading it: %s", namespace, name, exc)
                return False
        if pod is None or kpods.uid(pod) != uid:
            return False  # gone, or replaced by a pod of the same name
        if kpods.disrupted(pod):
            return True  # marked already (kube-scheduler's own preemption, or an earlier try)
        patch = kpods.disruption_patch(pod, why.reason, text, stamp)
        try:
            await kube.request("PATCH", path + "/status", body=patch)
            return True
        except ApiError as err:
            if err.status == 409 and not fresh:
                continue
            log.warning("cannot mark pod %s/%s as disrupted (%s): %s", namespace, name, why.reason, err)
            return False
        except Exception as exc:  # no answer: it may have been written; the deletion goes on
            log.warning(
                "cannot mark pod %s/%s as disrupted (%s): no answer (%s)", namespace, name, why.reason, exc
            )
            return False
    return False
