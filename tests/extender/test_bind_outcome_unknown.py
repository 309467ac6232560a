"""A Binding whose outcome is unknown (no answer, and the read back fails too, as it does when the
API server browns out) keeps its slot claimed: the pod may already run there, and giving the slot
back handed its GPUs to the gang's next member as well. A kept slot is bound again by
kube-scheduler's retry, offered only that slot's node."""

from __future__ import annotations

from typing import Any

from extender.gangs.bindinfo import ISOLATION_ANNOTATIONS
from extender.http.verbs import Scheduler
from extender.kube.client import pod_path
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube, Fault
from tests.extender.helpers import args, bind_args, example, pod, run, spec
from tests.extender.test_kube_edge import BINDING, apiserver


async def first_member_placed() -> tuple[list[dict[str, Any]], FakeKube, Scheduler, str]:
    """A gang of two on an API server, its first member filtered: the pods, the API server, the
    scheduler and the node the filter offered first."""
    pods = [pod(f"u{i}", f"w-{i}", "nlp", spec("nlp", 4, 2, "nlp/pair")) for i in range(2)]
    kube = apiserver(pods)
    s = kube_service(example(), kube).scheduler
    s.ready = True
    r = await s.filter(args(pods[0]))
    return pods, kube, s, r["NodeNames"][0]


def test_a_binding_with_no_answer_and_no_read_back_does_not_give_its_gpus_twice() -> None:
    async def go() -> None:
        pods, kube, s, node = await first_member_placed()
        # the Binding is applied but its reply is lost, and the read back gets no answer either
        kube.inject(Fault("POST", BINDING, "lost-reply"))
        kube.inject(Fault("GET", r"/pods/w-0$", "timeout"))
        b0 = await s.bind(bind_args(pods[0], node))
        w0 = kube.server.at(pod_path("nlp", "w-0"))
        assert w0["spec"].get("nodeName") == node  # the API server did bind it
        # the other member is filtered and bound, on the node its filter offers first
        r = await s.filter(args(pods[1]))
        offered = r["NodeNames"]
        assert offered, r
        target = node if node in offered else offered[0]
        b1 = await s.bind(bind_args(pods[1], target))
        assert b1 == {"Error": ""}, b1
        w1 = kube.server.at(pod_path("nlp", "w-1"))
        gpus0 = (w0["spec"]["nodeName"], w0["metadata"]["annotations"][ISOLATION_ANNOTATIONS[0]])
        gpus1 = (w1["spec"]["nodeName"], w1["metadata"]["annotations"][ISOLATION_ANNOTATIONS[0]])
        assert gpus0 != gpus1, (
            f"w-0 runs on {gpus0} (its bind answered {b0['Error']!r}) and w-1 was bound to the same GPUs"
        )

    run(go())


def test_a_binding_kept_for_an_unknown_outcome_is_bound_again_by_the_retry() -> None:
    """The other side of keeping the slot: a Binding that in fact never arrived is retried by
    kube-scheduler, and the retry binds the pod on the slot it kept."""

    async def go() -> None:
        pods, kube, s, node = await first_member_placed()
        kube.inject(Fault("POST", BINDING, "timeout"))  # never arrived
        kube.inject(Fault("GET", r"/pods/w-0$", "timeout"))
        assert (await s.bind(bind_args(pods[0], node)))["Error"]
        assert kube.server.at(pod_path("nlp", "w-0"))["spec"].get("nodeName") is None
        r = await s.filter(args(pods[0]))
        assert r["NodeNames"], r
        assert await s.bind(bind_args(pods[0], r["NodeNames"][0])) == {"Error": ""}
        r = await s.filter(args(pods[1]))
        assert await s.bind(bind_args(pods[1], r["NodeNames"][0])) == {"Error": ""}
        bound = [kube.server.at(pod_path("nlp", f"w-{i}")) for i in range(2)]
        places = {
            (p["spec"]["nodeName"], p["metadata"]["annotations"][ISOLATION_ANNOTATIONS[0]]) for p in bound
        }
        assert len(places) == 2

    run(go())
