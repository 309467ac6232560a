"""Pods, requests and a scheduler on the bundled example cluster, for the extender's unit tests."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from config.load import LoadedConfig, load_config
from extender import kubesched
from extender.http import wire
from extender.http.ports import Binder
from extender.http.verbs import Scheduler
from extender.ops.metrics import Metrics
from extender.standalone import EXAMPLE_CONFIG, MemoryBinder
from topology.core import Core

T = TypeVar("T")
ENABLE = "topogang.io/pod-scheduling-enable"
SPEC = "topogang.io/pod-scheduling-spec"

_LOADED: LoadedConfig | None = None


def example() -> LoadedConfig:
    global _LOADED
    if _LOADED is None:
        _LOADED = load_config(EXAMPLE_CONFIG)
    return _LOADED


def nodes() -> list[str]:
    return list(Core(example().spec).topo.node_names)


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def ready_node(name: str, allocatable: int, capacity: int | None = None) -> dict[str, Any]:
    """A Ready Node object with `allocatable` GPUs (and a `capacity`, when given)."""
    status: dict[str, Any] = {
        "conditions": [{"type": "Ready", "status": "True"}],
        "allocatable": {"nvidia.com/gpu": str(allocatable)},
    }
    if capacity is not None:
        status["capacity"] = {"nvidia.com/gpu": str(capacity)}
    return {"metadata": {"name": name}, "spec": {}, "status": status}


def scheduler(binder: Binder | None = None, clock: Clock | None = None, **kw: Any) -> Scheduler:
    loaded = example()
    s = Scheduler(
        Core(loaded.spec),
        binder or MemoryBinder(),
        metrics=Metrics(),
        clock=clock or Clock(),
        namespace_vcs=loaded.extras.namespace_virtual_clusters,
        ttl_seconds=kw.pop("ttl_seconds", 300.0),
        **kw,
    )
    s.ready = True
    return s


def spec(
    vc: str = "vision", gpus: int = 8, pods: int | None = None, group: str | None = None, **extra: Any
) -> str:
    doc: dict[str, Any] = {"virtualCluster": vc, "leafCellNumber": gpus, **extra}
    if pods is not None:
        doc["affinityGroup"] = {
            "name": group or f"{vc}/g",
            "members": [{"podNumber": pods, "leafCellNumber": gpus}],
        }
    return json.dumps(doc)


def pod(
    uid: str,
    name: str | None = None,
    ns: str = "vision",
    spec_text: str | None = None,
    *,
    enabled: bool = True,
    annotations: Mapping[str, str] | None = None,
    key: str = SPEC,
) -> dict[str, Any]:
    ann: dict[str, str] = dict(annotations or {})
    if spec_text is not None:
        ann[key] = spec_text
    limits = {ENABLE: "1"} if enabled else {"cpu": "1"}
    return {
        "metadata": {"uid": uid, "name": name or uid, "namespace": ns, "annotations": ann},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }


def fc_annotations(ns: str, fw: str, attempt: str, role: str, index: int) -> dict[str, str]:
    return {
        "FC_FRAMEWORK_NAMESPACE": ns,
        "FC_FRAMEWORK_NAME": fw,
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": attempt,
        "FC_TASKROLE_NAME": role,
        "FC_TASK_INDEX": str(index),
    }


def args(p: Mapping[str, Any], names: list[str] | None = None) -> wire.ExtenderArgs:
    return wire.parse_extender_args(
        {"Pod": p, "Nodes": None, "NodeNames": nodes() if names is None else names}
    )


def bind_args(p: Mapping[str, Any], node: str) -> wire.BindingArgs:
    m = p["metadata"]
    return wire.BindingArgs(m["name"], m["namespace"], m["uid"], node)


STUCK_SECONDS = 20.0  # a task still running this long after it was cancelled does not stop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, where a task left running that does not stop when cancelled fails the
    test, naming the task and where it waits, instead of hanging it (`asyncio.run` waits for ever)."""

    async def main() -> T:
        try:
            return await coro
        finally:
            await _stop_the_rest()

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main())
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


async def _stop_the_rest() -> None:
    """Cancel every other task, and the tasks their cancellation starts, and wait for them all. Each
    round lets the tasks just started take their first step first, as `asyncio.run` does when its
    main task ends (a coroutine cancelled before its first step warns it was never awaited)."""
    me = asyncio.current_task()
    await asyncio.sleep(0)
    while left := [t for t in asyncio.all_tasks() if t is not me and not t.done()]:
        for t in left:
            t.cancel()
        _, stuck = await asyncio.wait(left, timeout=STUCK_SECONDS)
        if stuck:
            where = io.StringIO()
            for t in stuck:
                t.print_stack(limit=12, file=where)
            raise AssertionError(f"{len(stuck)} tasks do not stop when cancelled:\n{where.getvalue()}")
        await asyncio.sleep(0)


class InProcess:
    """kube-scheduler's transport for `extender.kubesched`'s cycle, over a scheduler's verbs called
    in-process; the last filter reply is kept for the test to read."""

    def __init__(self, s: Scheduler) -> None:
        self.s = s
        self.last_filter: dict[str, Any] = {}

    async def filter(self, p: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
        self.last_filter = await self.s.filter(args(p, list(names)))
        return self.last_filter

    async def prioritize(self, p: Mapping[str, Any], names: Sequence[str]) -> list[dict[str, Any]]:
        return await self.s.prioritize(args(p, list(names)))

    async def bind(self, p: Mapping[str, Any], node: str) -> dict[str, Any]:
        return await self.s.bind(bind_args(p, node))

    async def preempt(self, p: Mapping[str, Any], victims: Mapping[str, Any]) -> Any:
        return await self.s.preempt(wire.parse_preemption_args({"Pod": p, "NodeNameToMetaVictims": victims}))


class NoVictims:
    """kube-scheduler's side of preemption where nothing is bound that it may preempt."""

    def dry_run(self, nodes: Sequence[str], priority: int) -> dict[str, Any]:
        return {}

    def evict(self, chosen: Mapping[str, Any]) -> None:
        raise AssertionError("no victims were offered")


async def place(s: Scheduler, p: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """One pod through kube-scheduler's cycles (`extender.kubesched.schedule`: filter, prioritize
    when more than one node passed, bind); the filter's reply and the node bound, or None when the
    pod waits. A bind that fails fails the test."""
    ext = InProcess(s)
    got = await kubesched.drive_async(kubesched.schedule(p, nodes(), NoVictims()), ext)
    assert got.node is not None or not got.text.startswith("bind failed"), got.text
    return ext.last_filter, got.node


async def until_ready(http: httpx.AsyncClient, url: str = "/readyz", what: str = "the extender") -> None:
    """Wait (10 s at most) for a server a test started on loopback to answer its readiness probe."""
    for _ in range(500):
        with contextlib.suppress(httpx.TransportError):
            if (await http.get(url)).status_code == 200:
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what} never became ready")
