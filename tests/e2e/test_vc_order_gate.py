"""The admission gate behind the real API server and kube-scheduler (`extender.kube.admission_gate`):
the chart's MutatingAdmissionPolicy (deploy/admission-gate.yaml, scoped here to the test's namespace)
creates each pod of topogang's profile behind `topogang.io/admission`; a gang waiting behind an older
gang of its VC keeps it, so kube-scheduler never tries it ([Queued] is never answered to it), and its
pods are told why; once the older gang is placed the gate is lifted and the gang starts after it.
The cluster is the example config (nlp: 3 nodes). Named to run after `test_control_plane.py`, whose
first test needs the session's extender not started yet (files run in name order)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from extender.kube.admission_gate import GATE
from tests.e2e.conftest import E2ECluster, Extender
from tests.e2e.helpers import (
    delete_pods,
    gang_pod,
    hold_for,
    none_bound,
    pod_events,
    submit_gang,
    wait_gone,
    wait_running,
    wait_until,
)
from tests.e2e.test_vc_order import HOLD_SECONDS, one_running_and_big_filtered

pytestmark = pytest.mark.e2e

POLICY = Path(__file__).resolve().parents[2] / "deploy" / "admission-gate.yaml"


@pytest.fixture
def gate_on(e2e_cluster: E2ECluster, gang_ns: str) -> Iterator[str]:
    """The plain manifest's policy and binding, the policy limited to the test's namespace."""
    api = client.AdmissionregistrationV1Api(e2e_cluster.core.api_client)
    policy, binding = (d for d in yaml.safe_load_all(POLICY.read_text()) if d)
    name = f"{policy['metadata']['name']}-{gang_ns}"
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    scope = {"matchLabels": {"kubernetes.io/metadata.name": gang_ns}}
    policy["spec"]["matchConstraints"]["namespaceSelector"] = scope
    api.create_mutating_admission_policy(body=policy)
    api.create_mutating_admission_policy_binding(body=binding)
    core = e2e_cluster.core

    def in_force() -> bool | None:  # the API server applies a new policy once its informer has it
        probe = gang_pod("probe", gang=f"{gang_ns}/probe", vc="nlp", members=[(1, 1)], gpus=1)
        made = core.create_namespaced_pod(gang_ns, probe, dry_run="All")
        gated = made.spec.scheduling_gates if made.spec is not None else None
        return any(g.name == GATE for g in gated or []) or None

    wait_until("the admission policy in force", in_force, 30)
    yield gang_ns
    api.delete_mutating_admission_policy_binding(name)
    api.delete_mutating_admission_policy(name)


def gates(core: client.CoreV1Api, ns: str, pod: str) -> list[str]:
    spec: Any = core.read_namespaced_pod(pod, ns).spec
    got: Any = spec.scheduling_gates or []
    return [g.name for g in got]


def test_a_gang_behind_an_older_one_stays_gated_and_kube_scheduler_never_tries_it(
    e2e_cluster: E2ECluster, extender: Extender, gate_on: str
) -> None:
    core, ns = e2e_cluster.core, gate_on
    probe = submit_gang(core, ns, "probe", 1, 1, "nlp")
    wait_running(core, ns, probe)  # the policy gates it; nothing ahead, so the leader lifts it at once
    assert gates(core, ns, probe[0]) == []
    wait_gone(core, ns, delete_pods(core, ns, probe))

    one, big = one_running_and_big_filtered(core, ns)
    small = submit_gang(core, ns, "small", 1, 8, "nlp")  # it would fit on a free nlp node

    def told() -> str | None:
        return next((e for e in pod_events(core, ns, small[0]) if "QueuedBehindOlderGang" in e), None)

    event = wait_until("small to be told it waits behind big", told, 30)
    assert f"gang {ns}/big" in event and GATE in event, event

    def gated_untried() -> str | None:
        if gates(core, ns, small[0]) != [GATE]:
            return f"gates {gates(core, ns, small[0])}"
        tried = [e for e in pod_events(core, ns, small[0]) if "FailedScheduling" in e or "[Queued]" in e]
        return f"kube-scheduler tried it: {tried}" if tried else None

    hold_for("small stays gated and untried while big waits", gated_untried, HOLD_SECONDS)
    wait_gone(core, ns, delete_pods(core, ns, one))
    wait_running(core, ns, big)
    wait_until("small's gate lifted once big is placed", lambda: gates(core, ns, small[0]) == [], 30)
    hold_for("small must not bind while big runs", lambda: none_bound(core, ns, small), HOLD_SECONDS)
    wait_gone(core, ns, delete_pods(core, ns, big))
    wait_running(core, ns, small)
