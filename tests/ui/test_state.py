"""GET /v1/ui/state without a browser: its shape, its change token, and its size at 1,000 nodes."""

from __future__ import annotations

import gzip
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from config.generate import generate_yaml
from config.load import load_config
from extender.gangs.waiting import Waiting
from extender.http.app import build_app
from extender.http.ui.state import STATES, ranges
from extender.http.verbs import Scheduler
from extender.standalone import build_standalone
from tests.extender import helpers
from topology.decisions import GangRequest, Member, WaitCode, WaitReason

if TYPE_CHECKING:
    from starlette.testclient import TestClient

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "example-cluster.yaml"


def asgi_client(app: Any) -> TestClient:
    with warnings.catch_warnings():  # starlette 1.x nags about httpx (still its transport)
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

        return TestClient(app, base_url="http://localhost")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Scheduler]]:
    """The generated 1,000-node × 8-GPU cluster, ~30% of its GPUs held by gangs."""
    cfg = tmp_path_factory.mktemp("ui") / "cluster-1000.yaml"
    cfg.write_text(generate_yaml(nodes=1000))
    service = build_standalone(load_config(cfg))
    s = service.scheduler
    for i in range(300):  # 2,400 GPUs: single 8-GPU pods, 2-pod gangs, 4-GPU pods; some opportunistic
        shape = [Member(1, 8), Member(2, 4), Member(4, 2)][i % 3]
        req = GangRequest(f"ns/g{i}", f"vc{i % 4 + 1}", (shape,), priority=-1 if i % 5 == 0 else 100)
        s.core.reserve(req, 0.0)
    for gang in s.core.gangs()[:150]:
        for slot in gang.slots:
            s.core.claim(
                gang.name, f"{gang.name}-{slot.index}", slot.leaf_number, 0.0, pod_name=f"p{slot.index}"
            )
    with asgi_client(build_app(service)) as client:
        yield client, s


def nodes_of(tops: list[Any]) -> list[str]:
    out: list[str] = []

    def walk(c: Any) -> None:
        if isinstance(c, str):
            out.append(c)
        else:
            assert isinstance(c[0], str) and isinstance(c[1], list)
            for k in c[1]:
                walk(k)

    for t in tops:
        walk(t)
    return out


def test_shape_at_1000_nodes(big: tuple[TestClient, Scheduler]) -> None:
    client, s = big
    doc = client.get("/v1/ui/state").json()
    assert doc["v"] == 1 and isinstance(doc["token"], str) and isinstance(doc["now"], float)
    assert set(doc) == {
        "v",
        "token",
        "now",
        "layoutToken",
        "layout",
        "gpus",
        "vcNames",
        "vcRuns",
        "vcs",
        "gangs",
        "waiting",
    }
    (chain,) = doc["layout"]["chains"]
    name, leaf_type, level_types, node_level, tops, pattern, exceptions, child_number = chain
    assert (name, leaf_type, node_level) == ("A100-RACK", "A100", 4)
    assert level_types == ["", "A100", "A100-SWITCH", "A100-HALF", "A100-NODE", "A100-RACK"]
    assert child_number[2:5] == [2, 2, 2] and pattern == list(range(8)) and exceptions == {}
    assert len(tops) == 125 and len(nodes_of(tops)) == 1000
    gpus = doc["gpus"]
    assert len(gpus) == 8000 and set(gpus) <= set(STATES)
    held = sum(len(g.held_leaves()) for g in s.core.gangs())
    assert held >= 2400 * 0.95
    assert len(gpus) - gpus.count("f") == held
    assert gpus.count("r") == sum(
        len(sl.leaves) for g in s.core.gangs() for sl in g.slots if sl.pod_uid is None
    )
    assert gpus.count("o") > 0 and gpus.count("u") > 0
    assert doc["vcNames"] == ["vc1", "vc2", "vc3", "vc4"]
    for vc in doc["vcs"]:
        _name, quota, used, opp, cells = vc
        assert quota == 1800 and 0 < used <= quota and opp > 0
        assert sum(c[1] * c[2] for c in cells) == quota
        assert sum(c[4] for c in cells) == used
    # every gang's slots name exactly the GPUs its placement says
    nodes = nodes_of(tops)
    for row in doc["gangs"]:
        gang = s.core.gang(row[0])
        assert gang is not None
        placement = s.core.placement_of(gang)
        for (slot, _pod, rs, pend), pod in zip(row[9], placement.pods, strict=True):
            assert slot == pod.slot and pend == []
            got = [
                (nodes[p // 8], p % 8) for r in range(0, len(rs), 2) for p in range(rs[r], rs[r] + rs[r + 1])
            ]
            assert got == [(pod.node, i) for i in pod.gpu_indices]


def test_size_and_change_token_at_1000_nodes(big: tuple[TestClient, Scheduler]) -> None:
    client, s = big
    full = client.get("/v1/ui/state", headers={"Accept-Encoding": "identity"})
    doc = full.json()
    zipped = client.get("/v1/ui/state", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    wire_size = int(zipped.headers["content-length"])
    assert len(full.content) < 150_000, len(full.content)  # 1,000 nodes, 300 gangs, ~30% full
    assert wire_size < 30_000, wire_size
    assert len(gzip.decompress(gzip.compress(full.content))) == len(full.content)
    # the layout is sent once: polls with its token leave it out
    poll = client.get("/v1/ui/state", params={"layout": doc["layoutToken"]}).json()
    assert "layout" not in poll and poll["gpus"] == doc["gpus"]
    # nothing changed: a tiny answer
    same = client.get("/v1/ui/state", params={"token": doc["token"], "layout": doc["layoutToken"]})
    assert same.json() == {"v": 1, "token": doc["token"], "unchanged": True, "now": same.json()["now"]}
    assert len(same.content) < 120
    # a change gets a new token
    s.core.reserve(GangRequest("ns/late", "vc1", (Member(1, 8),), priority=100), 0.0)
    s.lock.generation += 1  # a change made beside the verbs: the readers' copy must be taken anew
    try:
        changed = client.get(
            "/v1/ui/state", params={"token": doc["token"], "layout": doc["layoutToken"]}
        ).json()
        assert changed["token"] != doc["token"] and "unchanged" not in changed
        assert changed["gpus"].count("r") == doc["gpus"].count("r") + 8
    finally:
        s.core.delete_gang("ns/late")
        s.lock.generation += 1
    again = client.get("/v1/ui/state", params={"token": doc["token"]}).json()
    assert again.get("unchanged") is True  # back to the same state, back to the same token


def test_waiting_gangs_and_quota_cells_on_the_example_cluster() -> None:
    service = build_standalone(load_config(EXAMPLE))
    s = service.scheduler
    reason = WaitReason(WaitCode.INSUFFICIENT_QUOTA, "research", "VC research has 16 free; the gang needs 24")
    s.waiting["research/big"] = Waiting("research/big", "research", 100, 3, reason, 5.0, 6.0)
    s.core.reserve(GangRequest("vision/a", "vision", (Member(2, 8),), priority=10), 0.0)
    with asgi_client(build_app(service)) as client:
        doc = client.get("/v1/ui/state").json()
        assert doc["waiting"] == [
            [
                "research/big",
                "research",
                100,
                3,
                5.0,
                "InsufficientQuota",
                "VC research has 16 free; the gang needs 24",
            ]
        ]
        vcs = {v[0]: v for v in doc["vcs"]}
        assert vcs["vision"][1:4] == [48, 16, 0]
        assert vcs["vision"][4] == [["A100-RACK", 1, 32, 1, 16], ["A100-NODE", 2, 8, 0, 0]]
        assert vcs["research"][4] == [["A100-HALF", 4, 4, 0, 0]]
        (gang,) = doc["gangs"]
        assert gang[:6] == ["vision/a", "vision", 10, "Reserved", 2, 0]
        assert doc["gpus"].count("r") == 16
        # the page and its assets are served by the extender itself
        page = client.get("/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        for asset in ("ui.js", "ui.css"):
            assert client.get(f"/ui/static/{asset}").status_code == 200
        assert client.get("/ui/", follow_redirects=False).headers["location"] == "/ui"
        assert "/ui" in client.get("/").json()["paths"]


def test_a_gang_that_can_never_run_is_told_so_in_the_filter_the_ui_and_the_inspect_api() -> None:
    """A gang bigger than its VC's whole quota: every view of its wait says it can never run, and names
    the VC's own quota cells (research holds A100-HALF cells), not the rack the gang would need."""
    service = build_standalone(load_config(EXAMPLE))
    p = helpers.pod("u1", "big", "research", helpers.spec("research", 8, 3, "research/big"))
    with asgi_client(build_app(service)) as client:
        body = {"Pod": p, "Nodes": None, "NodeNames": helpers.nodes()}
        reply = client.post("/v1/extender/filter", json=body).json()
        filter_text = next(iter(reply["FailedAndUnresolvableNodes"].values()))
        (row,) = client.get("/v1/ui/state").json()["waiting"]
        group = client.get("/v1/inspect/affinitygroups/research/big").json()["status"]["waitReason"]
        (listed,) = client.get("/v1/inspect/affinitygroups/").json()["items"]
    never = "more than VC research's whole quota of 16: it can never run"
    for text in (filter_text, row[6], group["message"], listed["status"]["waitReason"]["message"]):
        assert never in text and "its quota there: 4 A100-HALF cells" in text
    assert (group["level"], group["cellType"]) == (3, "A100-HALF")


def test_ranges() -> None:
    assert ranges([]) == []
    assert ranges([3, 4, 5, 9, 1]) == [1, 1, 3, 3, 9, 1]
