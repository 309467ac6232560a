"""Kubernetes mode trusts the API server, not the request body.

A verb's body carries a whole pod object, and whoever can send one could otherwise make the extender
place, bind or preempt for a pod that does not exist, or for another team's pod described as the
sender likes. So when the service has a `PodSource` (Kubernetes mode: the pods the extender watches,
else one read from the API server), the pod a verb acts on is the API server's copy with the body's
UID; its namespace and name must be the body's. A pod the source does not know is answered as
unknown, in the verb's error shape, and nothing is placed, bound, evicted or told for it: a filter
error makes kube-scheduler requeue the pod, so a pod created an instant ago (the watch may lag behind
kube-scheduler's own informer) is simply filtered again after its backoff. Nothing is remembered of
an unknown pod.

A body whose pod does not opt in is taken as it is: the verbs only ever ignore such a pod.
"""

from __future__ import annotations

from dataclasses import replace

from extender.gangs.podspec import is_enabled
from extender.http import wire
from extender.http.answers import VerbError
from extender.http.ports import PodSource


class UnknownPodError(VerbError):
    """The pod a verb names is not the API server's (unknown, or known under another name)."""


async def trusted_pod(source: PodSource | None, pod: wire.WirePod) -> wire.WirePod:
    """The API server's copy of `pod` (the body's own without a source). Raises `UnknownPodError`."""
    if source is None or not is_enabled(pod.raw):
        return pod
    got = await source(pod.uid, pod.namespace, pod.name)
    if got is None:
        raise UnknownPodError(
            503,
            f"topogang: pod {pod.key} is not known from the API server (yet); nothing is decided for it "
            "until it is (kube-scheduler tries it again)",
        )
    try:
        known = wire.parse_pod(got)
    except wire.WireError as err:
        raise UnknownPodError(503, f"topogang: pod {pod.key} from the API server: {err}") from None
    if (known.uid, known.namespace, known.name) != (pod.uid, pod.namespace, pod.name):
        raise UnknownPodError(
            409,
            f"topogang: pod UID {pod.uid} is {known.namespace}/{known.name} on the API server, not "
            f"{pod.namespace}/{pod.name}; nothing is decided for it",
        )
    return known


async def trusted_args(source: PodSource | None, args: wire.ExtenderArgs) -> wire.ExtenderArgs:
    pod = await trusted_pod(source, args.pod)
    return args if pod is args.pod else replace(args, pod=pod)


async def trusted_preemption(source: PodSource | None, args: wire.PreemptionArgs) -> wire.PreemptionArgs:
    return replace(args, pod=await trusted_pod(source, args.pod))
