"""Spark on Kubernetes: labels `spark-app-selector: <app id>` and `spark-role: driver|executor`.

The application is one gang: the driver plus `spark.executor.instances` executors (with dynamic
allocation, `spark.dynamicAllocation.minExecutors`: the rest join as extras). The driver creates
its executors, so the gang is reserved whole when the driver is filtered and the driver binds
first; its executors take the reserved slots as they come. The Spark conf is read where it shows on
a pod: annotations or container env named after the conf key (`spark.executor.instances`, or
`SPARK_EXECUTOR_INSTANCES`), or `--conf key=value` container args. Executors read it from their own
pod, else from the driver pod (their owner reference, in Kubernetes mode), else they join the gang
their driver reserved. GPUs: the pod's `nvidia.com/gpu`; an executor's as the driver sees them,
`spark.executor.resource.gpu.amount`, else the driver's own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.conventions.common import (
    Claim,
    Objects,
    ObjRef,
    annotations_of,
    count,
    labels,
    meta,
    spec,
    text,
)
from extender.gangs.optin import pod_gpus
from topology.decisions import Member

APP = "spark-app-selector"
ROLE = "spark-role"
INSTANCES = "spark.executor.instances"
DYNAMIC = "spark.dynamicAllocation.enabled"
MIN_EXECUTORS = "spark.dynamicAllocation.minExecutors"
EXECUTOR_GPUS = "spark.executor.resource.gpu.amount"
_ENV = {INSTANCES: "SPARK_EXECUTOR_INSTANCES"}


def conf(pod: Mapping[str, Any]) -> dict[str, str]:
    """The Spark conf keys this module reads, from wherever they show on the pod."""
    keys = (INSTANCES, DYNAMIC, MIN_EXECUTORS, EXECUTOR_GPUS)
    out: dict[str, str] = {}
    containers = spec(pod).get("containers")
    for c in containers if isinstance(containers, list) else []:
        if not isinstance(c, dict):
            continue
        raw = c.get("args")
        args = [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
        for i, a in enumerate(args):
            pair = args[i + 1] if a == "--conf" and i + 1 < len(args) else a.removeprefix("--conf=")
            k, eq, v = pair.partition("=")
            if eq and k in keys and (a == "--conf" or a.startswith("--conf=")):
                out[k] = v
        env = c.get("env")
        for e in env if isinstance(env, list) else []:
            if isinstance(e, dict) and isinstance(e.get("value"), str):
                for k in keys:
                    if e.get("name") in (k, _ENV.get(k)):
                        out[k] = e["value"]
    ann = annotations_of(pod)
    for k in keys:
        if text(ann.get(k)) is not None:
            out[k] = str(ann[k]).strip()
    return out


def role(pod: Mapping[str, Any]) -> str | None:
    return text(labels(pod).get(ROLE))


def app(pod: Mapping[str, Any]) -> str | None:
    return text(labels(pod).get(APP))


def driver_ref(pod: Mapping[str, Any], namespace: str) -> ObjRef | None:
    owners = meta(pod).get("ownerReferences")
    for o in owners if isinstance(owners, list) else []:
        if isinstance(o, dict) and o.get("kind") == "Pod" and text(o.get("name")) is not None:
            return ObjRef("pod", namespace, str(o["name"]).strip())
    return None


def refs(pod: Mapping[str, Any], namespace: str) -> list[ObjRef]:
    if app(pod) is None or role(pod) != "executor" or INSTANCES in conf(pod):
        return []
    ref = driver_ref(pod, namespace)
    return [ref] if ref is not None else []


def executors(c: Mapping[str, str]) -> int | None:
    """Executors in the gang's core: minExecutors under dynamic allocation, else the instances."""
    if c.get(DYNAMIC, "").strip().lower() == "true":
        n = count(c.get(MIN_EXECUTORS, "0"), MIN_EXECUTORS, minimum=0)
        return n if n is not None else 0
    return count(c.get(INSTANCES), INSTANCES, minimum=0)


def shape(c: Mapping[str, str], driver_gpus: int, executor_gpus: int | None) -> tuple[Member, ...] | None:
    n = executors(c)
    if n is None:
        return None
    per = count(c.get(EXECUTOR_GPUS), EXECUTOR_GPUS) or executor_gpus or driver_gpus
    members = [Member(1, driver_gpus)] if driver_gpus > 0 else []
    if n > 0 and per:
        members.append(Member(n, per))
    return tuple(members) or None


def claim(pod: Mapping[str, Any], namespace: str, gpus: int, objects: Objects) -> Claim | None:
    name = app(pod)
    r = role(pod)
    if name is None or r not in ("driver", "executor"):
        return None
    gang = f"{namespace}/{name}"
    key = f"label {APP}"
    members: tuple[Member, ...] | None = None
    if r == "driver":
        members = shape(conf(pod), gpus, None)
    else:
        mine = conf(pod)
        if INSTANCES in mine or DYNAMIC in mine:
            # the conf copied onto executors (spark.kubernetes.executor.annotation.*) lacks the
            # driver's GPUs: the driver's own only show on the driver
            members = shape(mine, 0, gpus)
            ref = driver_ref(pod, namespace)
            drv = objects.get(ref) if ref is not None else None
            if drv is not None:
                members = shape(mine, pod_gpus(drv), gpus)
        else:
            ref = driver_ref(pod, namespace)
            drv = objects.get(ref) if ref is not None else None
            if drv is not None:
                members = shape(conf(drv), pod_gpus(drv), gpus)
    return Claim("spark", key, name, gang, None, members=members)
