"""Bindings through the API server: the `pods/binding` subresource, carrying the decision.

The Binding's annotations are merged into the pod atomically with `spec.nodeName` (the commit
point). A 409 for a pod that is already on the same node with the same GPUs is success, so a
retried bind (after a timed-out reply) is harmless; so is a Binding whose reply never came when
the pod, read back, shows it there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from extender.gangs.bindinfo import ISOLATION_ANNOTATIONS
from extender.http.ports import BindError, BindTarget, BindUnknownError, FencedError
from extender.kube import pods as kpods
from extender.kube.client import ApiError, AsyncKube, pod_path


def binding_body(target: BindTarget, node: str, annotations: Mapping[str, str]) -> dict[str, Any]:
    """A `v1.Binding`; the UID makes the API server refuse a re-created pod of the same name."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": target.name,
            "namespace": target.namespace,
            "uid": target.uid,
            "annotations": dict(annotations),
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


class KubeBinder:
    def __init__(self, kube: AsyncKube) -> None:
        self.kube = kube
        self.fence: Callable[[], bool] = lambda: True  # may this replica write now (its Lease held)

    def fenced(self, target: BindTarget) -> None:
        if not self.fence():
            raise FencedError(f"pod {target.namespace}/{target.name} not written: this replica does not lead")

    async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None:
        self.fenced(target)
        path = pod_path(target.namespace, target.name) + "/binding"
        try:
            done = await self.kube.request("POST", path, body=binding_body(target, node, annotations))
        except ApiError as err:
            if err.status == 409 and await self._already_on(target, node, annotations):
                return
            raise BindError(f"the API server refused the Binding: {err}") from None
        except Exception as exc:  # no answer (a timeout, a dropped connection): it may have been applied
            there = await self._read_back(target, node, annotations)
            if there:
                return
            if there is None:
                raise BindUnknownError(f"the Binding got no answer, nor did its read back: {exc}") from exc
            raise BindError(f"the Binding got no answer: {exc}") from exc
        if done is None:
            raise BindError(f"pod {target.namespace}/{target.name} does not exist")

    async def annotate(self, target: BindTarget, annotations: Mapping[str, str]) -> None:
        """Re-write a bound pod's bind info (a promoted gang's new quota cell types) with a merge
        patch; the UID precondition keeps it off a re-created pod of the same name."""
        self.fenced(target)
        body = {"metadata": {"uid": target.uid, "annotations": dict(annotations)}}
        try:
            done = await self.kube.request("PATCH", pod_path(target.namespace, target.name), body=body)
        except ApiError as err:
            raise BindError(f"the API server refused the annotation patch: {err}") from None
        if done is None:
            raise BindError(f"pod {target.namespace}/{target.name} does not exist")

    async def _read_back(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> bool | None:
        """Whether a Binding that got no answer took effect (None: the read failed too, so no one
        knows). Its slot must not go back to the gang unless it did not: the pod may already run
        there, and the GPUs would be given out twice."""
        try:
            return await self._already_on(target, node, annotations)
        except Exception:
            return None

    async def _already_on(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> bool:
        """Whether the pod is bound by this very decision: same UID, node and GPUs (on other GPUs
        of that node, the slot being bound would be held for a pod running elsewhere)."""
        pod = await self.kube.request("GET", pod_path(target.namespace, target.name))
        if pod is None or kpods.uid(pod) != target.uid or kpods.node_name(pod) != node:
            return False
        have = kpods.pod_annotations(pod)
        return all(have.get(k) == v for k, v in annotations.items() if k in ISOLATION_ANNOTATIONS)
