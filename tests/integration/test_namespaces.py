"""Tenants stay in their own lane, over HTTP: the attacks a pod of namespace `evil` could make on
`vision`'s gangs by naming them (join, squat an explicit name or a one-pod name, claim a
FrameworkController identity), and what the ledger, the Framework proxy and `topogang barrier` hand
vision's job afterwards: vision's pods only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from tests.extender.helpers import fc_annotations
from tests.integration.conftest import ROOT, Pods
from tests.integration.test_server import bind, filter_

FC_GROUP = "frameworkcontroller.microsoft.com"


def group_spec(vc: str, gpus: int, pods: int, name: str, role: str | None = None) -> dict[str, Any]:
    member: dict[str, Any] = {"podNumber": pods, "leafCellNumber": gpus}
    if role is not None:
        member["taskRole"] = role
    return {
        "virtualCluster": vc,
        "leafCellNumber": gpus,
        "affinityGroup": {"name": name, "members": [member]},
    }


def place(client: httpx.Client, pod: dict[str, Any], names: list[str]) -> str:
    got = filter_(client, pod, names)
    assert got["Error"] == "" and got["NodeNames"], got
    node: str = got["NodeNames"][0]
    assert bind(client, pod, node) == ""
    return node


def gang(client: httpx.Client, ns: str, name: str, **params: str) -> httpx.Response:
    return client.get(f"/v1/gangs/{quote(ns)}/{quote(name)}", params=params)


def member_uids(doc: dict[str, Any]) -> set[str]:
    return {m["podUID"] for m in doc["members"] if m.get("podUID")}


def uids(*pods: dict[str, Any]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def test_a_pod_naming_another_namespaces_gang_gets_a_gang_of_its_own(
    client: httpx.Client, pods: Pods, node_names: list[str]
) -> None:
    """The join: evil's pod names vision's group with vision's very shape. It is no member of
    vision's gang, takes none of its slots, and vision's ledger entry lists vision's pods only."""
    name = f"vision/train-{pods.run}"
    v = [pods.make(f"train-{i}", "vision", group_spec("vision", 8, 2, name)) for i in range(2)]
    intruder = pods.make("intruder", "evil", group_spec("vision", 8, 2, name))
    place(client, v[0], node_names)
    filter_(client, intruder, node_names)  # its own gang evil/vision/train-…: placed or waiting
    place(client, v[1], node_names)
    doc = gang(client, "vision", f"train-{pods.run}").json()
    assert doc["namespace"] == "vision" and doc["phase"] == "Ready", doc
    assert member_uids(doc) == uids(*v) and doc["expected"] == 2
    theirs = gang(client, "evil", name)
    assert theirs.status_code == 200 and theirs.json()["namespace"] == "evil"
    assert member_uids(theirs.json()) <= uids(intruder)
    # no read by another namespace's path, and no list entry mixes namespaces
    assert gang(client, "evil", f"train-{pods.run}").status_code == 404
    for item in client.get("/v1/gangs").json()["items"]:
        ours = {p["metadata"]["uid"]: p["metadata"]["namespace"] for p in [*v, intruder]}
        assert all(ours.get(u, item["namespace"]) == item["namespace"] for u in member_uids(item)), item


def test_a_name_claimed_first_elsewhere_with_another_shape_is_not_squatted(
    client: httpx.Client, pods: Pods, node_names: list[str]
) -> None:
    """The squat: evil claims vision's group name first with another shape; vision's pods are not
    told "gang already exists with a different shape", and place and bind whole."""
    name = f"vision/sq-{pods.run}"
    squatter = pods.make("squatter", "evil", group_spec("nlp", 4, 1, name))
    assert filter_(client, squatter, node_names)["Error"] == ""
    v = [pods.make(f"sq-{i}", "vision", group_spec("vision", 8, 2, name)) for i in range(2)]
    for p in v:
        place(client, p, node_names)
    doc = gang(client, "vision", f"sq-{pods.run}").json()
    assert doc["phase"] == "Ready" and member_uids(doc) == uids(*v)


def test_a_one_pod_gang_cannot_be_squatted_from_any_namespace(
    client: httpx.Client, pods: Pods, node_names: list[str]
) -> None:
    """The one-pod name: the old default `<namespace>/<pod>` claimed by evil is evil's own gang, and
    the one-pod form `pod:<pod>` is refused as an explicit name even inside vision."""
    solo = pods.make("solo", "vision", {"virtualCluster": "vision", "leafCellNumber": 4})
    pod_name = solo["metadata"]["name"]
    old_default = pods.make("old-default", "evil", group_spec("nlp", 8, 1, f"vision/{pod_name}"))
    assert filter_(client, old_default, node_names)["Error"] == ""
    for ns, name in [
        ("vision", f"pod:{pod_name}"),
        ("vision", f"vision/pod:{pod_name}"),
        ("evil", f"pod:{pod_name}"),
    ]:
        squat = pods.make("squat", ns, group_spec("vision" if ns == "vision" else "nlp", 8, 1, name))
        got = filter_(client, squat, node_names)
        assert "affinityGroup.name" in got["Error"] and "reserved for one-pod gangs" in got["Error"], got
        assert got["NodeNames"] in (None, [])
    place(client, solo, node_names)
    doc = gang(client, "vision", f"pod:{pod_name}").json()
    assert doc["phase"] == "Ready" and member_uids(doc) == uids(solo)


def test_a_framework_identity_of_another_namespace_is_refused_and_never_handed_out(
    client: httpx.Client, pods: Pods, node_names: list[str], tmp_path: Path
) -> None:
    """The FrameworkController id: evil's pod claims `FC_FRAMEWORK_NAMESPACE: vision` (refused,
    naming the annotation) or names the gang id as a group (a gang of evil's own). The Framework
    proxy and `topogang barrier` hand vision's job its own pods' IPs only."""
    fw, attempt = f"llm-{pods.run}", "0_att"
    spec = group_spec("vision", 8, 2, "ignored", role="w")
    v = [
        pods.make(f"llm-w-{i}", "vision", spec, annotations=fc_annotations("vision", fw, attempt, "w", i))
        for i in range(2)
    ]
    place(client, v[0], node_names)
    claimed = pods.make("fc-claim", "evil", spec, annotations=fc_annotations("vision", fw, attempt, "w", 1))
    got = filter_(client, claimed, node_names)
    assert "FC_FRAMEWORK_NAMESPACE" in got["Error"] and "vision" in got["Error"], got
    assert got["NodeNames"] in (None, [])
    named = pods.make("fc-name", "evil", group_spec("nlp", 8, 1, f"vision/{fw}/{attempt}"))
    assert filter_(client, named, node_names)["Error"] == ""
    place(client, v[1], node_names)

    doc = gang(client, "vision", fw).json()
    assert doc["phase"] == "Ready" and member_uids(doc) == uids(*v)
    ips = {m["podIP"] for m in doc["members"]}
    proxy = client.get(f"/apis/{FC_GROUP}/v1/namespaces/vision/frameworks/{fw}").json()
    shown = {
        t["attemptStatus"]["podIP"]
        for role in proxy["status"]["attemptStatus"]["taskRoleStatuses"]
        for t in role["taskStatuses"]
    }
    assert shown == ips and len(ips) == 2

    out = tmp_path / "out"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "FC_FRAMEWORK_NAMESPACE": "vision",
        "FC_FRAMEWORK_NAME": fw,
        "FC_TASKROLE_NAME": "w",
        "FC_TASK_INDEX": "0",
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": attempt,
        "BARRIER_CHECK_INTERVAL_SEC": "5",
        "BARRIER_CHECK_TIMEOUT_SEC": "60",
        "TOPOGANG_BARRIER_TIME_SCALE": "0.04",
        "TOPOGANG_BARRIER_DIR": str(out),
        "TOPOGANG_LEDGER_URL": str(client.base_url).rstrip("/"),
        "KUBECONFIG": str(tmp_path / "none"),
    }
    r = subprocess.run(
        [sys.executable, str(ROOT / "topogang_cli.py"), "barrier"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    ledger_view = json.loads((out / "gang.json").read_text())
    assert member_uids(ledger_view) == uids(*v)
    injected = (out / "injector.sh").read_text()
    in_order = sorted(doc["members"], key=lambda m: m["taskIndex"])
    assert f"export FB_W_IPS={','.join(m['podIP'] for m in in_order)}" in injected
