"""One pending pod whose read needs an API call that fails (DRA mode counts a pod's claimed GPUs
with a GET of its ResourceClaim: `DraCatalog.claim_gpus`, `kube.request`, which raises
`NoAnswerError`/`ApiError` on a timeout, a 429 or a 5xx) is skipped by `pending.recall` at the
start of a lead, as a pod whose spec is bad is: its first filter notes its gang. Before, `recall`
raised, `serve_as_leader` gave the lead up ("the leader's work failed") and the replica was done."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.kube import pending
from extender.kube.client import NoAnswerError
from tests.extender.helpers import pod, run, scheduler, spec


def gpu_pod(uid: str, name: str, ns: str) -> dict[str, Any]:
    """A pod of topogang's profile asking for 8 GPUs, no topogang annotation (a convention's pod)."""
    p = pod(uid, name, ns, spec(ns, 8))
    p["metadata"]["annotations"] = {}
    p["spec"]["schedulerName"] = "topogang"
    p["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
    return p


def test_a_pod_whose_read_meets_an_api_fault_does_not_end_the_lead() -> None:
    async def go() -> None:
        s = scheduler()

        async def claim_gpus(raw: Mapping[str, Any], namespace: str) -> int:
            raise NoAnswerError("GET resourceclaims: no answer from the API server (timed out)")

        s.conventions.claim_gpus = claim_gpus  # DRA mode's hook, its GET timing out
        good = pod("g0", "good", "nlp", spec("nlp", 8, 1, "nlp/good"))
        good["spec"]["schedulerName"] = "topogang"
        try:
            noted = await pending.recall(s, [gpu_pod("b0", "dra-pod", "nlp"), good])
        except (TimeoutError, OSError) as err:
            raise AssertionError(f"recall raised {err!r}: the lead would be given up") from err
        assert noted == 1 and "nlp/good" in s.waiting

    run(go())
