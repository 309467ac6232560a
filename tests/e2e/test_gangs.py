"""Gang scheduling end to end: the real extender (Kubernetes mode) behind the real kube-scheduler.

Each test creates pods (and nodes' labels, taints, PriorityClasses) through the API server and waits
on what the cluster then shows: bindings, GPU-index annotations, Running pods with IPs, deletions.
The cluster is the example config (3 racks x 4 nodes x 8 GPUs; VCs vision 48 GPUs = a rack + 2 nodes,
nlp 24 GPUs = 3 nodes, research 16 GPUs = 4 half nodes), made of KWOK nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial

import pytest
from kubernetes import client

from tests.e2e.conftest import E2ECluster, Extender, holds_nothing, priority_classes
from tests.e2e.helpers import (
    GPU,
    PodConditions,
    assert_whole_gang,
    delete_pods,
    gpu_collisions,
    hold_for,
    http_text,
    none_bound,
    object_names,
    pods_of,
    racks,
    seen_by_scheduler,
    submit_gang,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

HOLD_SECONDS = 5.0  # how long "nothing of this gang binds" is checked, repeatedly
LOW, HIGH = "e2e-topogang-low", "e2e-topogang-high"
LABEL = "e2e.topogang.io/pool"
TAINT = "e2e.topogang.io/blocked"


# ------------------------------------------------------------------------------------------ 1. placement
def test_four_pod_gang_binds_whole_under_one_rack(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    core = e2e_cluster.core
    names = submit_gang(core, gang_ns, "train", 4, 8, "vision")
    pods = wait_running(core, gang_ns, names)
    assert_whole_gang(pods, 8)
    nodes = sorted(p.node for p in pods.values() if p.node)
    assert len(set(nodes)) == 4, f"8-GPU members must be on 4 distinct nodes: {nodes}"
    rack = racks(e2e_cluster.env["TOPOLOGY"])
    assert len({rack[n] for n in nodes}) == 1, f"not under one rack: {[(n, rack[n]) for n in nodes]}"
    assert len({p.ip for p in pods.values()}) == 4
    assert not gpu_collisions(core)


# ------------------------------------------------------------------------------------------ 2. atomicity
def test_gang_that_does_not_fit_binds_nothing_until_it_fits_whole(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """nlp has 3 nodes. A takes 2; B (2 x 8 GPUs) could put one member on the third node, but must
    bind nothing until A goes, then bind whole."""
    core = e2e_cluster.core
    a = submit_gang(core, gang_ns, "a", 2, 8, "nlp")
    a_pods = wait_running(core, gang_ns, a)
    b = submit_gang(core, gang_ns, "b", 2, 8, "nlp")
    wait_until("gang b to be filtered", lambda: seen_by_scheduler(core, gang_ns, b[0]), 30)
    checks = hold_for("gang b must not bind partially", lambda: none_bound(core, gang_ns, b), HOLD_SECONDS)
    assert checks >= 10
    # Room for one member of b was there all along: holding back was the gang's choice.
    usage = extender.summary()["virtualClusters"]["nlp"]
    assert usage["quota"] - usage["used"] == 8, f"one nlp node must stay free for this test: {usage}"
    assert all(p.running for p in pods_of(core, gang_ns, a).values())

    wait_gone(core, gang_ns, delete_pods(core, gang_ns, a))
    b_pods = wait_running(core, gang_ns, b)
    assert_whole_gang(b_pods, 8)
    assert len({p.node for p in b_pods.values()}) == 2
    assert not gpu_collisions(core)
    print(
        f"gang a was on {sorted(str(p.node) for p in a_pods.values())}, gang b on "
        f"{sorted(str(p.node) for p in b_pods.values())}"
    )


# ------------------------------------------------------------------------------------------ 3. kube filters
@pytest.fixture
def node_marks(e2e_cluster: E2ECluster) -> Iterator[set[str]]:
    """Nodes a test labels/taints/cordons (it adds their names); restored afterwards."""
    touched: set[str] = set()
    yield touched
    core = e2e_cluster.core
    for name in sorted(touched):
        node = core.read_node(name)
        taints = [t.to_dict() for t in (node.spec.taints if node.spec else None) or [] if t.key != TAINT]
        core.patch_node(
            name,
            {
                "metadata": {"labels": {LABEL: None}},
                "spec": {"taints": taints or None, "unschedulable": None},
            },
        )


def first_choice(core: client.CoreV1Api, ns: str, prefix: str, pods: int, vc: str) -> list[str]:
    """The nodes the extender picks for a gang on the current cluster (the gang is deleted again)."""
    names = submit_gang(core, ns, prefix, pods, 8, vc)
    chosen = sorted(str(p.node) for p in wait_running(core, ns, names).values())
    wait_gone(core, ns, delete_pods(core, ns, names))
    return chosen


def test_kube_scheduler_filters_still_apply(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str, node_marks: set[str]
) -> None:
    """A taint and a nodeSelector exclude the very nodes the extender chose for the same gang before."""
    core = e2e_cluster.core
    n1, n2 = first_choice(core, gang_ns, "probe", 2, "nlp")
    wait_until("the probe gang released", lambda: holds_nothing(extender) is None, 30)
    all_nodes = sorted(object_names(core.list_node().items))
    node_marks.update(all_nodes)
    for n in all_nodes:
        if n != n2:  # n2 lacks the label the pods select
            core.patch_node(n, {"metadata": {"labels": {LABEL: gang_ns}}})
    core.patch_node(n1, {"spec": {"taints": [{"key": TAINT, "value": gang_ns, "effect": "NoSchedule"}]}})

    names = submit_gang(core, gang_ns, "picky", 2, 8, "nlp", node_selector={LABEL: gang_ns})
    pods = wait_running(core, gang_ns, names)
    assert_whole_gang(pods, 8)
    used = {p.node for p in pods.values()}
    assert n1 not in used, f"placed on {n1}, which has a NoSchedule taint the pods do not tolerate"
    assert n2 not in used, f"placed on {n2}, which lacks the pods' nodeSelector label"

    # Only one node passes kube-scheduler's filters for this gang: it must wait whole, not half-bind.
    solo = next(n for n in all_nodes if n not in used and n not in (n1, n2))
    core.patch_node(solo, {"metadata": {"labels": {LABEL: f"{gang_ns}-solo"}}})
    lone = submit_gang(core, gang_ns, "lone", 2, 8, "vision", node_selector={LABEL: f"{gang_ns}-solo"})
    wait_until("gang lone to be filtered", lambda: seen_by_scheduler(core, gang_ns, lone[0]), 30)
    hold_for("a gang with one feasible node must not bind", lambda: none_bound(core, gang_ns, lone), 3)


# ------------------------------------------------------------------------------------------ 4. preemption
def preempted_events(extender: Extender) -> float:
    """`Preempted` Events the extender wrote or suppressed (its rate limit), from its /metrics."""
    text = http_text(f"{extender.url}/metrics")
    pattern = r'^topogang_events_total\{(?=[^}]*reason="Preempted")[^}]*\} ([0-9.e+]+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.M))


def test_higher_priority_gang_preempts_the_whole_lower_gang(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """nlp is full with a 3-pod priority-10 gang; a 2-pod priority-100 gang of nlp evicts all three
    (the victim is the gang, not just the pods in the way) and binds whole."""
    core = e2e_cluster.core
    priority_classes(e2e_cluster, {LOW: 10, HIGH: 100})
    low = submit_gang(core, gang_ns, "low", 3, 8, "nlp", priority=10, priority_class=LOW)
    low_pods = wait_running(core, gang_ns, low)
    assert_whole_gang(low_pods, 8)

    high = submit_gang(core, gang_ns, "high", 2, 8, "nlp", priority=100, priority_class=HIGH)
    high_pods = wait_running(core, gang_ns, high, timeout=90)
    assert_whole_gang(high_pods, 8)
    left = [n for n in low if n in pods_of(core, gang_ns, low)]
    assert not left, f"low-priority members not evicted: {left}"
    # Two paths may evict a victim, whichever comes first: the extender at filter time, or kube-scheduler's
    # own preemption deleting the victims the extender's preempt verb named (which needs its
    # NodeResourcesFit to see the nodes full: not while topogang's profile leaves nvidia.com/gpu to the
    # extender). The other then finds the pod gone.
    log, sched_log = extender.log(), e2e_cluster.log("kube-scheduler")
    for n in low:
        by_extender = re.search(
            rf"evicting pod {gang_ns}/{n} .*\({gang_ns}/high\) \[PreemptionByScheduler\]", log
        )
        by_scheduler = re.search(
            rf'preempted victim Pod" preemptor="{gang_ns}/high-\d+" victim="{gang_ns}/{n}"', sched_log
        )
        assert by_extender or by_scheduler, f"{n} was evicted by neither the extender nor kube-scheduler"
    assert not gpu_collisions(core)


def test_guaranteed_gang_reclaims_a_rack_from_opportunistic_gangs_on_full_nodes(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """Every node is held by opportunistic 2-pod gangs (priority -1, one rack each) of pods that
    request `nvidia.com/gpu` and carry no PriorityClass, as a device-plugin user writes them. A
    guaranteed 2-pod gang of nlp must still start: the extender preempts one opportunistic gang
    whole and the new gang binds in one rack. This needs kube-scheduler to leave GPU counting to
    the extender in topogang's profile (`managedResources` nvidia.com/gpu `ignoredByScheduler`):
    when its NodeResourcesFit counts them, every node is full, no node reaches the extender's
    filter (so no filter-time preemption) and, all pods being of one pod priority, its own
    preemption finds no victim; the gang would wait for nodes to free by themselves and then take
    whatever free nodes there are, across racks (what `make bench-peers` showed live)."""
    core = e2e_cluster.core
    rack = racks(e2e_cluster.env["TOPOLOGY"])
    fillers: list[str] = []
    for i in range(len(rack) // 2):
        fillers += submit_gang(core, gang_ns, f"guest{i}", 2, 8, "vision", priority=-1)
    guests = wait_running(core, gang_ns, fillers)
    assert len({p.node for p in guests.values()}) == len(rack), "the guests must fill every node"
    assert extender.summary()["gpus"]["free"] == 0

    seen, told_before = PodConditions(core, gang_ns), preempted_events(extender)
    names = submit_gang(core, gang_ns, "owner", 2, 8, "nlp")
    pods = wait_running(core, gang_ns, names, timeout=90)
    assert_whole_gang(pods, 8)
    used = {str(p.node) for p in pods.values()}
    assert len({rack[n] for n in used}) == 1, f"not under one rack: {sorted((n, rack[n]) for n in used)}"
    left = pods_of(core, gang_ns, fillers)
    gone = sorted(set(fillers) - set(left))
    assert len(gone) == 2 and gone[0].rsplit("-", 1)[0] == gone[1].rsplit("-", 1)[0], (
        f"exactly one guest gang must be preempted, whole: {gone}"
    )
    # each was marked as kube-scheduler marks its victims before it went, and told why; the real API
    # server took the condition (the extender's own RBAC allows pods/status patch, nothing more)
    why = "topogang: preempting to accommodate a higher priority pod group (owner)"
    for victim in gone:
        mark = wait_until(f"{victim}'s mark", partial(seen.condition, victim, "DisruptionTarget"), 30)
        assert (mark["status"], mark["reason"], mark["message"]) == ("True", "PreemptionByScheduler", why), (
            mark
        )
    # and told in a Normal Event `Preempted` each, rate-limited as every Event is (the guests' own
    # Events may have used the namespace's share: then it is counted as suppressed)
    wait_until(
        "a Preempted Event per victim", lambda: preempted_events(extender) - told_before == len(gone), 30
    )
    events = core.list_namespaced_event(gang_ns, field_selector="reason=Preempted").items
    assert {str(e.involved_object.name) for e in events} <= set(gone)
    assert all(e.message == why and e.type == "Normal" for e in events), [e.message for e in events]
    seen.stop()
    assert not gpu_collisions(core)


# ------------------------------------------------------------------------------------------ 5. node health
def test_unschedulable_node_is_avoided_by_the_next_gang(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str, node_marks: set[str]
) -> None:
    """A node cordoned after the extender chose it is not used for the next gang, although the pods
    tolerate the unschedulable taint (so kube-scheduler's own NodeUnschedulable filter lets it through:
    only the extender's node-health view keeps it out). A cordon is `spec.unschedulable`, a different
    signal from the Ready condition of the NotReady test below."""
    core = e2e_cluster.core
    n1, _ = first_choice(core, gang_ns, "probe", 2, "nlp")
    wait_until("the probe gang released", lambda: holds_nothing(extender) is None, 30)
    node_marks.add(n1)
    core.patch_node(n1, {"spec": {"unschedulable": True}})
    wait_until(
        "the extender to mark the cordoned node bad", lambda: extender.summary()["gpus"]["bad"] == 8, 30
    )

    tolerate = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    names = submit_gang(core, gang_ns, "after", 2, 8, "nlp", tolerations=tolerate)
    pods = wait_running(core, gang_ns, names)
    assert_whole_gang(pods, 8)
    assert n1 not in {p.node for p in pods.values()}, f"placed on cordoned {n1}"

    core.patch_node(n1, {"spec": {"unschedulable": None}})
    wait_until("the extender to mark the node good again", lambda: extender.summary()["gpus"]["bad"] == 0, 30)


STATUS_ANNOTATION = "kwok.x-k8s.io/status"  # =custom: KWOK leaves the node's status to the test


def ready_condition(core: client.CoreV1Api, name: str) -> str | None:
    node = core.read_node(name)
    conditions = (node.status.conditions if node.status else None) or []
    return next((c.status for c in conditions if c.type == "Ready"), None)


@pytest.fixture
def not_ready(e2e_cluster: E2ECluster) -> Iterator[set[str]]:
    """Nodes a test takes NotReady (it adds their names): each is annotated so KWOK stops writing its
    status (scripts/e2e/cluster-up.sh), then its Ready condition is patched to False. Afterwards the
    annotation goes, KWOK's node-initialize stage sets Ready=True again, and that is waited for."""
    taken: set[str] = set()
    yield taken
    core = e2e_cluster.core
    for name in sorted(taken):
        core.patch_node(name, {"metadata": {"annotations": {STATUS_ANNOTATION: None}}})
    for name in sorted(taken):
        wait_ready_again(core, name)


def wait_ready_again(core: client.CoreV1Api, name: str) -> None:
    wait_until(f"KWOK to make {name} Ready again", lambda: ready_condition(core, name) == "True", 30)


def take_not_ready(core: client.CoreV1Api, name: str) -> None:
    """What a node whose kubelet stopped reporting looks like: Ready=False (no taint, since no node
    lifecycle controller runs here, so kube-scheduler itself does not filter the node out)."""
    core.patch_node(name, {"metadata": {"annotations": {STATUS_ANNOTATION: "custom"}}})
    core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "KubeletNotReady",
                        "message": "e2e: node taken NotReady",
                    }
                ]
            }
        },
    )


def test_not_ready_node_is_marked_bad_and_avoided_by_the_next_gang(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str, not_ready: set[str]
) -> None:
    """A node whose Ready condition turns False after the extender chose it: the extender marks its
    8 GPUs bad and the same gang shape goes elsewhere; when the node is Ready again its GPUs are good."""
    core = e2e_cluster.core
    n1, _ = first_choice(core, gang_ns, "probe", 2, "nlp")
    wait_until("the probe gang released", lambda: holds_nothing(extender) is None, 30)
    not_ready.add(n1)
    take_not_ready(core, n1)
    wait_until(
        "the extender to mark the NotReady node bad", lambda: extender.summary()["gpus"]["bad"] == 8, 30
    )
    # KWOK must not have flipped it back meanwhile: the test would then prove nothing.
    assert ready_condition(core, n1) == "False"
    node = core.read_node(n1)
    assert not (node.spec.taints if node.spec else None), "a taint would let kube-scheduler filter it"

    names = submit_gang(core, gang_ns, "after", 2, 8, "nlp")
    pods = wait_running(core, gang_ns, names)
    assert_whole_gang(pods, 8)
    assert n1 not in {p.node for p in pods.values()}, f"placed on NotReady {n1}"
    assert ready_condition(core, n1) == "False"

    core.patch_node(n1, {"metadata": {"annotations": {STATUS_ANNOTATION: None}}})
    wait_ready_again(core, n1)
    wait_until("the extender to mark the node good again", lambda: extender.summary()["gpus"]["bad"] == 0, 30)


def test_gpus_held_by_a_pod_that_is_not_topogangs_are_not_given_out_again(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """Plain pods (no opt-in, no topogang profile) created with `spec.nodeName` on the very nodes the
    extender picks for a gang hold their 8 GPUs each. topogang's profile leaves `nvidia.com/gpu` to the
    extender, so only the extender can keep the same gang shape off them: their GPUs count as bad
    while the pods are there, and come back when they are deleted."""
    core = e2e_cluster.core
    chosen = first_choice(core, gang_ns, "probe", 2, "nlp")
    wait_until("the probe gang released", lambda: holds_nothing(extender) is None, 30)
    plain = [f"plain-{i}" for i in range(len(chosen))]
    for name, node in zip(plain, chosen, strict=True):
        pod = {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "main", "image": "fake.invalid/other:1", "resources": {"limits": {GPU: "8"}}}
                ],
            },
        }
        core.create_namespaced_pod(gang_ns, client.V1Pod.model_validate(pod))
    wait_until("the extender to hold their GPUs", lambda: extender.summary()["gpus"]["bad"] == 16, 30)

    names = submit_gang(core, gang_ns, "after", 2, 8, "nlp")
    pods = wait_running(core, gang_ns, names)
    assert_whole_gang(pods, 8)
    used = {str(p.node) for p in pods.values()}
    assert not used & set(chosen), f"placed onto GPUs plain pods hold: {sorted(used & set(chosen))}"
    assert not gpu_collisions(core)

    wait_gone(core, gang_ns, delete_pods(core, gang_ns, plain))
    wait_until("their GPUs back", lambda: extender.summary()["gpus"]["bad"] == 0, 30)


# ------------------------------------------------------------------------------------------ 6. restart
def test_restarted_extender_recovers_allocations_and_never_double_books(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    core = e2e_cluster.core
    a = submit_gang(core, gang_ns, "a", 2, 8, "nlp")
    r = submit_gang(core, gang_ns, "r", 1, 4, "research")
    before = {**wait_running(core, gang_ns, a), **wait_running(core, gang_ns, r)}

    extender.restart()
    usage = extender.summary()["virtualClusters"]
    assert (usage["nlp"]["used"], usage["research"]["used"]) == (16, 4), f"not recovered: {usage}"
    assert "recovered 3 bound pods in 2 gangs" in extender.log()

    # Without recovery the extender would place these exactly where a and r are.
    c = submit_gang(core, gang_ns, "c", 1, 8, "nlp")
    d = submit_gang(core, gang_ns, "d", 1, 4, "research")
    after = {**wait_running(core, gang_ns, c), **wait_running(core, gang_ns, d)}
    assert {p.node for p in after.values()}.isdisjoint({p.node for n, p in before.items() if n in a})
    collisions = gpu_collisions(core)
    assert not collisions, f"GPUs double-booked after the restart: {collisions}"
    # nlp's 3 nodes are all held now (2 by a from before the restart): one more nlp pod must wait.
    e = submit_gang(core, gang_ns, "e", 1, 8, "nlp")
    wait_until("gang e to be filtered", lambda: seen_by_scheduler(core, gang_ns, e[0]), 30)
    hold_for("nlp is full: gang e must not bind", lambda: none_bound(core, gang_ns, e), 3)
    assert {n: (p.node, p.gpus) for n, p in pods_of(core, gang_ns, [*a, *r]).items()} == {
        n: (p.node, p.gpus) for n, p in before.items()
    }
