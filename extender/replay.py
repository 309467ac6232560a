"""`topogang replay --url URL [--config FILE]`: drive a running extender exactly like kube-scheduler.

For every pod of a small job mix it calls filter with the full node list, prioritize when more than
one node survives, and bind on the best score; when filter says preemption may help (FailedNodes)
and the pod outranks pods already bound there, it calls preempt with those pods as the dry run's
victims and, when the extender names victims, deletes the chosen node's victims (through the
standalone server's pod-deletion route, as kube-scheduler would through the API) and tries again.
That cycle is `extender.kubesched`'s, the one the load tests and the soak run too.

The mix is built from the config's VCs (largest quota first): a 4-pod x 8-GPU gang of
FrameworkController tasks submitted in random order, single-GPU pods, a 2-pod gang, an
opportunistic gang, a gang larger than its VC's quota (it waits, with the reason), a low-priority
batch gang, and a high-priority pod that needs a whole node while lower-priority pods hold its VC's
quota (preemption: the replay names the pods it evicts).

It prints every decision and a summary, then the server's decision counters from /metrics. At the
end it deletes every pod it created, bound or still waiting, so the server is left as it was and
the replay can be run again and again; with --keep it leaves them all in place, so that
/v1/inspect, /v1/gangs, the affinity groups and the UI have its gangs to show.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from config.load import ConfigError, load_config
from extender import kubesched
from extender.gangs.identity import one_pod_key
from extender.standalone import EXAMPLE_CONFIG
from topology.core import Core

SPEC = "topogang.io/pod-scheduling-spec"
ENABLE = "topogang.io/pod-scheduling-enable"


def plural(n: int, word: str) -> str:
    """`1 pod`, `2 pods`: the replay's lines are read by people."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def pods_times_gpus(pods: list[int]) -> str:
    """`1 pod x 1 GPU`, `4 pods x 8 GPUs`; pods of different sizes are listed (`2 pods: 8+4 GPUs`)."""
    if len(set(pods)) <= 1:
        return f"{plural(len(pods), 'pod')} x {plural(pods[0] if pods else 0, 'GPU')}"
    return f"{plural(len(pods), 'pod')}: {'+'.join(map(str, pods))} GPUs"


class ReplayError(Exception):
    pass


@dataclass
class Client:
    """Both of the extender's doors: `verbs` (kube-scheduler's: the verbs and standalone's state
    changes) and `base` (the read listener)."""

    base: str
    timeout: float = 10.0
    verbs: str = ""

    def url(self, method: str, path: str) -> str:
        door = path.startswith("/v1/extender/") or (path.startswith("/v1/standalone/") and method != "GET")
        return (self.verbs or self.base if door else self.base) + path

    def call(self, method: str, path: str, body: object | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url(method, path), data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            raw, status = err.read(), err.code
        except (urllib.error.URLError, OSError) as err:
            raise ReplayError(
                f"cannot reach {self.url(method, path)}: {getattr(err, 'reason', err)}"
            ) from None
        if path == "/metrics":
            return status, raw.decode()
        try:
            return status, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return status, raw.decode(errors="replace")

    def post(self, verb: str, body: object) -> Any:
        status, doc = self.call("POST", f"/v1/extender/{verb}", body)
        if status != 200 and verb != "preempt":
            raise ReplayError(f"{verb} answered HTTP {status}: {doc}")
        return doc if status == 200 else kubesched.Refused(status, doc)


@dataclass
class Job:
    gang: str
    vc: str
    priority: int
    pods: list[int]  # GPUs per pod
    framework: bool = False
    single: bool = False
    note: str = ""

    @property
    def namespace(self) -> str:
        return self.gang.split("/", 1)[0]

    @property
    def base(self) -> str:
        return self.gang.split("/", 1)[1]

    def server_gang(self, run: str) -> str:
        """The gang's name on the server: FrameworkController tasks form `<ns>/<framework>/<attempt>`,
        a pod without an affinity group is its own gang `<ns>/pod:<pod>`."""
        if self.framework:
            return f"{self.namespace}/{self.base}/0_{run}"
        if self.single:
            return one_pod_key(self.namespace, f"{self.base}-0")
        return self.gang


@dataclass
class Bound:
    uid: str
    node: str
    priority: int
    gang: str


@dataclass
class Stats:
    pods: int = 0
    bound: int = 0
    placed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    preempt_calls: int = 0
    victims: int = 0


def job_mix(core: Core, run: str) -> list[Job]:
    """The scripted jobs, using the config's VCs by quota (largest first)."""
    vcs = sorted(((vc, core.vc_quota(vc)) for vc in core.vc_names()), key=lambda kv: (-kv[1], kv[0]))
    if not vcs:
        raise ReplayError("the config has no virtual clusters")
    big = vcs[0][0]
    mid = vcs[1][0] if len(vcs) > 1 else big
    small, small_quota = vcs[-1] if len(vcs) > 2 else vcs[0]
    node = core.largest_node()
    mid_quota = core.vc_quota(mid)
    batch = max(1, (mid_quota - 2) // node)
    too_big = small_quota // node + 1
    return [
        Job(f"{big}/train-{run}", big, 100, [node] * 4, framework=True, note="4 FrameworkController tasks"),
        Job(f"{mid}/notebook-a-{run}", mid, 0, [1], single=True),
        Job(f"{mid}/notebook-b-{run}", mid, 0, [1], single=True),
        Job(f"{small}/pair-{run}", small, 0, [2, 2]),
        Job(f"{small}/scavenger-{run}", small, -1, [4, 4], note="opportunistic"),
        Job(f"{small}/too-big-{run}", small, 0, [node] * too_big, note="larger than the VC's quota"),
        Job(f"{mid}/batch-low-{run}", mid, 10, [node] * batch, note="low priority"),
        Job(
            f"{mid}/urgent-{run}",
            mid,
            500,
            [node],
            note="high priority, a whole node: lower-priority pods hold its VC's quota, so it preempts",
        ),
    ]


def pod_for(job: Job, index: int, run: str) -> dict[str, Any]:
    gpus = job.pods[index]
    name = f"{job.base}-{index}"
    ns = job.namespace
    spec: dict[str, Any] = {"virtualCluster": job.vc, "priority": job.priority, "leafCellNumber": gpus}
    annotations: dict[str, str] = {}
    if not job.single:
        sizes: dict[int, int] = {}
        for g in job.pods:
            sizes[g] = sizes.get(g, 0) + 1
        members: list[dict[str, Any]] = [{"podNumber": n, "leafCellNumber": g} for g, n in sizes.items()]
        if job.framework:
            members = [{"podNumber": len(job.pods), "leafCellNumber": gpus, "taskRole": "worker"}]
            annotations.update(
                {
                    "FC_FRAMEWORK_NAMESPACE": ns,
                    "FC_FRAMEWORK_NAME": job.base,
                    "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": f"0_{run}",
                    "FC_TASKROLE_NAME": "worker",
                    "FC_TASK_INDEX": str(index),
                }
            )
        spec["affinityGroup"] = {"name": job.gang, "members": members}
    annotations[SPEC] = json.dumps(spec)
    return {
        "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()), "annotations": annotations},
        "spec": {
            "schedulerName": "topogang",
            "priority": job.priority,
            "containers": [{"name": "main", "resources": {"limits": {ENABLE: "1"}}}],
        },
        "status": {"phase": "Pending"},
    }


class Replay:
    def __init__(self, client: Client, nodes: list[str], out: Any = sys.stdout, seed: int = 0) -> None:
        self.c = client
        self.nodes = nodes
        self.out = out
        self.rng = random.Random(seed)
        self.bound: dict[str, Bound] = {}
        self.created: dict[str, str] = {}  # every pod sent to the server, uid -> namespace/name
        self.stats = Stats()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # the transport (HTTP) and kube-scheduler's view of the pods, for `kubesched`
    def filter(self, pod: kubesched.Pod, names: Sequence[str]) -> Any:
        return self.c.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": list(names)})

    def prioritize(self, pod: kubesched.Pod, names: Sequence[str]) -> Any:
        return self.c.post("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": list(names)})

    def bind(self, pod: kubesched.Pod, node: str) -> Any:
        meta = pod["metadata"]
        body = {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        }
        return self.c.post("bind", body)

    def preempt(self, pod: kubesched.Pod, victims: Mapping[str, Any]) -> Any:
        self.stats.preempt_calls += 1
        return self.c.post(
            "preempt", {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims}
        )

    def dry_run(self, nodes: Sequence[str], priority: int) -> dict[str, Any]:
        """kube-scheduler's dry run: on each candidate node, every lower-priority pod is a victim."""
        return kubesched.meta_victims(
            (node, [b.uid for b in self.bound.values() if b.node == node and b.priority < priority])
            for node in nodes
        )

    def evict(self, chosen: Mapping[str, Any]) -> None:
        """Delete the victims on the node kube-scheduler picks, as it would through the API."""
        node = kubesched.fewest_victims(chosen)
        uids = [p["UID"] for p in chosen[node]["Pods"]]
        names = ", ".join(self.created.get(u, u) for u in uids)
        self.say(
            f"    preempt: victims on {len(chosen)} node(s); deleting {len(uids)} pod(s) on {node}: {names}"
        )
        for uid in uids:
            self.delete(uid)
            self.stats.victims += 1
        self.sync()  # the extender evicts the rest of each victim gang itself

    def schedule(self, pod: dict[str, Any], priority: int, gang: str) -> str:
        """One kube-scheduler cycle for a pod: the outcome as text (`bound ...`, `waits ...`, ...)."""
        meta = pod["metadata"]
        self.created[meta["uid"]] = f"{meta['namespace']}/{meta['name']}"
        outcome = kubesched.drive(kubesched.schedule(pod, self.nodes, self), self)
        if outcome.node is not None:
            self.bound[meta["uid"]] = Bound(meta["uid"], outcome.node, priority, gang)
        return outcome.text

    def sync(self) -> None:
        """Forget pods the server no longer has bound."""
        try:
            status, doc = self.c.call("GET", "/v1/standalone/bindings")
        except ReplayError:
            return
        if status == 200 and isinstance(doc, dict):
            for uid in [u for u in self.bound if u not in doc]:
                del self.bound[uid]

    def delete(self, uid: str) -> None:
        self.bound.pop(uid, None)
        self.c.call("DELETE", f"/v1/standalone/pods/{quote(uid, safe='')}")

    def clean_up(self) -> int:
        """Delete every pod this replay created: bound ones free their GPUs, waiting ones end their
        gang's wait (a preemption victim already deleted is simply gone). Returns how many."""
        for uid in self.created:
            self.delete(uid)
        return len(self.created)

    def describe(self, gang: str) -> str:
        status, doc = self.c.call("GET", f"/v1/inspect/affinitygroups/{gang}")
        if status != 200 or not isinstance(doc, dict):
            return ""
        st = doc.get("status", {})
        placement = "  ".join(
            f"{n}:{','.join(map(str, g))}" for n, g in st.get("physicalPlacement", {}).items()
        )
        return f"within one {st.get('lcaCellType', '?')}: {placement}"

    def run_job(self, job: Job, run: str) -> None:
        order = list(range(len(job.pods)))
        if job.framework:
            self.rng.shuffle(order)
        pods = {i: pod_for(job, i, run) for i in order}
        outcomes = []
        for i in order:
            self.stats.pods += 1
            outcome = self.schedule(pods[i], job.priority, job.gang)
            outcomes.append(outcome)
            self.say(f"  {pods[i]['metadata']['namespace']}/{pods[i]['metadata']['name']:<22} {outcome}")
            if outcome.startswith("bound"):
                self.stats.bound += 1
        title = f"{job.gang} (VC {job.vc}, priority {job.priority}, {pods_times_gpus(job.pods)})"
        if all(o.startswith("bound") for o in outcomes):
            self.stats.placed.append(job.gang)
            self.say(f"= {title}: placed {self.describe(job.server_gang(run))}")
        elif any(o.startswith("rejected") for o in outcomes):
            self.stats.rejected.append(job.gang)
            self.say(f"= {title}: rejected")
        else:
            self.stats.waiting.append(job.server_gang(run))
            self.say(f"= {title}: waits")


def next_port(url: str) -> str:
    """The URL of `serve`'s default verbs listener for the read listener at `url`: the next port."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{port + 1}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="topogang replay", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--url", default="http://127.0.0.1:9096", help="the extender (default: %(default)s)")
    ap.add_argument(
        "--verbs-url",
        default=None,
        help="the extender's verbs listener (default: --url with the next port, as `serve` does)",
    )
    ap.add_argument("--config", default=str(EXAMPLE_CONFIG), help="the cluster config the server runs")
    ap.add_argument("--seed", type=int, default=1, help="order of the FrameworkController tasks")
    ap.add_argument(
        "--keep",
        action="store_true",
        help="leave every pod in place at the end (bound and waiting), to look at them afterwards; "
        "without it the replay deletes all the pods it created",
    )
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        loaded = load_config(args.config)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 1
    core = Core(loaded.spec)
    client = Client(args.url.rstrip("/"), verbs=(args.verbs_url or next_port(args.url)).rstrip("/"))
    run = uuid.uuid4().hex[:6]
    replay = Replay(client, list(core.node_names()), seed=args.seed)
    try:
        status, ready = client.call("GET", "/readyz")
        if status != 200:
            raise ReplayError(f"{args.url} is not ready: {ready}")
        replay.say(f"replaying against {args.url}: {len(core.node_names())} nodes, run {run}")
        for job in job_mix(core, run):
            replay.say(f"- {job.gang}{f' ({job.note})' if job.note else ''}")
            replay.run_job(job, run)
        s = replay.stats
        replay.say(
            f"summary: {s.bound}/{s.pods} pods bound; gangs placed {len(s.placed)}, "
            f"waiting {len(s.waiting)}, rejected {len(s.rejected)}; "
            f"preempt calls {s.preempt_calls}, victims deleted {s.victims}"
        )
        for gang in s.waiting:
            status, doc = client.call("GET", f"/v1/inspect/affinitygroups/{gang}")
            reason = doc.get("status", {}).get("waitReason") if isinstance(doc, dict) else None
            if reason:
                replay.say(f"  {gang} waits [{reason['code']}]: {reason['message']}")
        _, metrics = client.call("GET", "/metrics")
        replay.say("decision counters (/metrics):")
        for line in str(metrics).splitlines():
            if line.startswith("topogang_extender_decisions_total"):
                replay.say(f"  {line}")
    except ReplayError as err:
        print(f"topogang replay: {err}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            replay.say("kept every pod (--keep); restart the server to start afresh")
        else:  # leave the server as it was, even after a failure
            try:
                replay.say(f"deleted the {replay.clean_up()} pods this replay created (--keep keeps them)")
            except ReplayError as err:
                print(f"topogang replay: cleaning up: {err}", file=sys.stderr)
    return 0
