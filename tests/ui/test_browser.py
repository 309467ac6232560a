"""The cluster view in headless Chromium against a real standalone extender (uvicorn subprocess).

Each test opens /ui, drives the server through the extender verbs exactly as kube-scheduler does,
and checks what the page shows without reloading it. Screenshots land in results/ui/.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from config.generate import generate_yaml
from tests.integration.conftest import Pods, Server, running_server
from tests.ui import drive
from tests.ui.conftest import skip_without_browser

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

VIEWPORT = {"width": 1600, "height": 1000}
TIMEOUT_MS = 10_000

# (node, GPU index) of every GPU element with a class, read from the DOM alone
DOM_GPUS = """(cls) => Array.from(document.querySelectorAll('#topology .g' + cls)).map((el) => {
  const node = el.closest('.node');
  const i = Array.from(node.querySelectorAll('.g')).indexOf(el);
  return [node.dataset.node, window.topogangUI.gpuIdx[Number(el.dataset.i)], i, el.className];
})"""


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    skip_without_browser()
    with running_server() as s:
        yield s


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=30.0) as c:
        yield c


@pytest.fixture
def pods(client: httpx.Client) -> Iterator[Pods]:
    p = Pods(client)
    try:
        yield p
    finally:
        p.cleanup()


class Opened:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on(
            "console",
            lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"requestfailed: {r.url} {r.failure}"))

    def renders(self) -> int:
        n: int = self.page.evaluate("window.topogangUI.renders")
        return n


@pytest.fixture
def opened(browser: Browser, server: Server) -> Iterator[Opened]:
    # the tests read the page's state with evaluated expressions, which its policy forbids it
    # (`test_the_page_runs_under_its_content_security_policy` opens it without this)
    ctx = browser.new_context(viewport=VIEWPORT, bypass_csp=True)  # type: ignore[arg-type]
    page = ctx.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    o = Opened(page)
    page.goto(f"{server.url}/ui")
    page.wait_for_function("window.topogangUI && window.topogangUI.renders > 0")
    try:
        yield o
    finally:
        ctx.close()


def dom_gpus(page: Page, cls: str) -> set[tuple[str, int]]:
    rows: list[list[Any]] = page.evaluate(DOM_GPUS, cls)
    for node, idx, nth, _ in rows:
        assert idx == nth, f"{node}: GPU element {nth} says index {idx}"  # example nodes number 0..7
    return {(r[0], r[1]) for r in rows}


def wait_classes(page: Page, want: set[tuple[str, int]], state: str) -> None:
    """Until every GPU in `want` has the state class (the page polls; nothing reloads it)."""
    page.wait_for_function(
        """([want, cls]) => want.every(([node, idx]) => {
            const ui = window.topogangUI;
            const els = document.querySelectorAll('#topology .node[data-node="' + node + '"] .g');
            return els[idx] && els[idx].classList.contains(cls);
        })""",
        arg=[sorted(want), f"s-{state}"],
    )


def test_page_loads_without_console_errors(opened: Opened, client: httpx.Client, shots: Path) -> None:
    page = opened.page
    assert page.title() == "topogang · cluster view"
    assert page.locator("#topology .g").count() == 96
    assert page.locator("#topology .node").count() == 12
    assert page.locator("#topology .cell").count() == 3  # racks
    # racks are named by their nodes' common prefix, not by their index in physicalCells
    labels = page.locator("#topology .cell > .lbl").all_inner_texts()
    assert labels == ["A100-RACK a100-r1-*", "A100-RACK a100-r2-*", "A100-RACK a100-r3-*"]
    # NVLink/PCIe grouping: every node nests 2 halves of 2 switches of 2 GPUs
    assert page.locator("#topology .node").first.locator(".grp.l2").count() == 4
    assert page.locator("#quotas .vc").count() == 3
    assert page.locator("#legend [data-state]").count() == 6
    page.wait_for_function("window.topogangUI.polls >= 2")  # polling works and stays quiet
    page.screenshot(path=str(shots / "empty.png"))
    assert opened.errors == []


def test_the_page_runs_under_its_content_security_policy(
    browser: Browser, server: Server, client: httpx.Client, pods: Pods
) -> None:
    """The page and its assets carry a policy that allows no script but the page's own file and no
    frame around it (a slip in escaping a name is contained), and the page works under it: it
    builds, polls and shows a gang with no violation in the console."""
    for path in ("/ui", "/ui/static/ui.js", "/ui/static/ui.css"):
        headers = client.get(path).headers
        policy = headers["content-security-policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy, path
        assert "unsafe-eval" not in policy and "script-src" not in policy, path  # scripts: 'self' only
        assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    ctx = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    try:
        page = ctx.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        o = Opened(page)
        page.goto(f"{server.url}/ui")
        page.locator("#topology .g").first.wait_for()
        names = drive.node_names(client)
        drive.schedule_gang(client, pods, names, "vision/csp", "vision", 1, 8)
        page.locator('#gangs tr.gang[data-gang="vision/csp"]').wait_for()
        assert page.locator("#quotas .vc").count() == 3
        assert o.errors == []
    finally:
        ctx.close()


def test_bound_gang_changes_colour_without_reload(
    opened: Opened, client: httpx.Client, pods: Pods, shots: Path
) -> None:
    page = opened.page
    names = drive.node_names(client)
    page.evaluate("window.__sameDocument = 'yes'")
    gang = f"vision/train-{pods.run}"
    drive.schedule_gang(client, pods, names, gang, "vision", 2, 8, bind=1)  # one bound, one reserved
    held = drive.placement(client, gang)
    assert len(held) == 16
    bound_node = next(iter(json.loads(client.get("/v1/standalone/bindings").text).values()))["node"]
    wait_classes(page, {g for g in held if g[0] == bound_node}, "u")
    wait_classes(page, {g for g in held if g[0] != bound_node}, "r")
    page.screenshot(path=str(shots / "reserved.png"))
    drive.schedule(
        client, pods.make(f"train-{pods.run}-late", "vision", drive.gang_spec(gang, "vision", 2, 8)), names
    )
    wait_classes(page, held, "u")
    assert page.evaluate("window.__sameDocument") == "yes"  # no reload happened
    assert dom_gpus(page, ".s-u") == held  # nothing else turned "used"
    assert page.locator(f'#gangs tr.gang[data-gang="{gang}"]').count() == 1
    page.screenshot(path=str(shots / "bound.png"))
    assert opened.errors == []


def test_clicking_a_gang_highlights_exactly_its_gpus(
    opened: Opened, client: httpx.Client, pods: Pods, shots: Path
) -> None:
    page = opened.page
    names = drive.node_names(client)
    a = f"nlp/bert-{pods.run}"
    b = f"research/rl-{pods.run}"
    c = f"vision/vit-{pods.run}"
    drive.schedule_gang(client, pods, names, a, "nlp", 2, 4)
    drive.schedule_gang(client, pods, names, b, "research", 1, 2)
    drive.schedule_gang(client, pods, names, c, "vision", 3, 8, bind=2)
    want = drive.placement(client, a)
    assert len(want) == 8
    row = page.locator(f'#gangs tr.gang[data-gang="{a}"]')
    row.wait_for()
    row.click()
    page.wait_for_function("document.querySelectorAll('#topology .g.hl').length > 0")
    assert dom_gpus(page, ".hl") == want
    assert "focus" in (page.locator("#topology").get_attribute("class") or "")
    assert "sel" in (row.get_attribute("class") or "")
    assert page.locator("#selection").inner_text().startswith(f"{a}: 8 GPUs")
    page.screenshot(path=str(shots / "selected.png"))
    # a click on one of another gang's GPUs selects that gang instead
    other = drive.placement(client, c)
    node, idx = sorted(other)[0]
    page.locator(f'#topology .node[data-node="{node}"] .g').nth(idx).click()
    page.wait_for_function(f"window.topogangUI.selected === {json.dumps(c)}")
    assert dom_gpus(page, ".hl") == other
    # hover card: pod, gang, GPU index, VC, priority
    page.locator(f'#topology .node[data-node="{node}"] .g').nth(idx).hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert node in text and f"GPU {idx}" in text and c in text and "vision" in text and "priority 100" in text
    page.screenshot(path=str(shots / "hover.png"))
    page.keyboard.press("Escape")
    page.wait_for_function("document.querySelectorAll('#topology .g.hl').length === 0")
    assert opened.errors == []


def test_a_waiting_gang_shows_its_reason(
    opened: Opened, client: httpx.Client, pods: Pods, shots: Path
) -> None:
    page = opened.page
    names = drive.node_names(client)
    gang = f"research/big-{pods.run}"  # 24 GPUs: more than research's whole quota (four 4-GPU halves)
    pod = pods.make(f"big-{pods.run}", "research", drive.gang_spec(gang, "research", 3, 8))
    assert drive.schedule(client, pod, names) is None
    status = client.get(f"/v1/inspect/affinitygroups/{gang}").json()["status"]
    assert status["state"] == "Waiting"
    reason = status["waitReason"]
    row = page.locator(f'#gangs tr.reason[data-gang="{gang}"]')
    row.wait_for()
    text = row.inner_text()
    assert reason["code"] in text and reason["message"] in text
    assert page.locator(f'#gangs tr.gang.waiting[data-gang="{gang}"] .phase').inner_text() == "Waiting"
    page.locator(f'#gangs tr.gang[data-gang="{gang}"]').click()
    assert "holds no GPUs" in page.locator("#selection").inner_text()
    assert page.locator("#topology .g.hl").count() == 0
    page.screenshot(path=str(shots / "waiting.png"))
    assert opened.errors == []


def test_the_gang_table_fits_its_panel_at_1400_px(
    browser: Browser, server: Server, client: httpx.Client, pods: Pods, shots: Path
) -> None:
    """No sideways scrolling at 1400 px, even with a classic (space-taking) scrollbar in the panel, a
    waiting gang with a long reason, a multi-node placement and a four-digit priority."""
    names = drive.node_names(client)
    drive.schedule_gang(client, pods, names, f"vision/a-rather-long-job-name-{pods.run}", "vision", 4, 8)
    big = pods.make(
        f"big-{pods.run}", "research", drive.gang_spec(f"research/big-{pods.run}", "research", 3, 8)
    )
    assert drive.schedule(client, big, names) is None
    urgent = pods.make(
        f"urgent-{pods.run}", "nlp", drive.gang_spec(f"nlp/urgent-{pods.run}", "nlp", 1, 8, 1000)
    )
    assert drive.schedule(client, urgent, names) is not None
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
    try:
        page = ctx.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{server.url}/ui")
        page.locator(f'#gangs tr.reason[data-gang="research/big-{pods.run}"]').wait_for()
        overflow = """(shrink) => {
            const aside = document.querySelector('aside');
            aside.style.width = shrink ? (aside.clientWidth - shrink) + 'px' : '';
            return [aside.scrollWidth, aside.clientWidth, document.documentElement.scrollWidth, innerWidth];
        }"""
        for shrink in (0, 17):  # 17 px: what a classic scrollbar takes
            aside_scroll, aside_width, page_scroll, page_width = page.evaluate(overflow, shrink)
            assert aside_scroll <= aside_width and page_scroll <= page_width, (
                shrink,
                aside_scroll,
                aside_width,
            )
        page.screenshot(path=str(shots / "gangs-1400px.png"))
    finally:
        ctx.close()


def test_thousand_nodes_render_and_update(browser: Browser, tmp_path: Path, shots: Path) -> None:
    """1,000 nodes × 8 GPUs, ~30% full: the page builds, updates and highlights; timings are
    measured and written to results/ui/perf-1000-nodes.json (tests never assert timings)."""
    cfg = tmp_path / "cluster-1000.yaml"
    cfg.write_text(generate_yaml(nodes=1000))
    with running_server(cfg) as srv, srv.client(timeout=60.0) as client:
        names = drive.node_names(client)
        assert len(names) == 1000
        pods = Pods(client)
        vcs = ["vc1", "vc2", "vc3", "vc4"]
        for i in range(60):  # 60 gangs × 4 pods × 8 GPUs, reserved by their first filter
            drive.schedule_gang(client, pods, names, f"{vcs[i % 4]}/job{i}", vcs[i % 4], 4, 8, bind=0)
        for i in range(100):  # 100 bound 1..8-GPU jobs
            drive.schedule_gang(client, pods, names, f"{vcs[i % 4]}/small{i}", vcs[i % 4], 1, 1 << (i % 4))
        ctx = browser.new_context(viewport=VIEWPORT, bypass_csp=True)  # type: ignore[arg-type]
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        o = Opened(page)
        t0 = time.perf_counter()
        page.goto(f"{srv.url}/ui")
        page.wait_for_function("window.topogangUI && window.topogangUI.renders > 0")
        first_render_s = time.perf_counter() - t0
        assert page.locator("#topology .g").count() == 8000
        stats: dict[str, Any] = page.evaluate(
            "({build: window.topogangUI.lastRenderMs, update: window.topogangUI.lastUpdateMs})"
        )
        used = page.evaluate("window.topogangUI.gpus.replace(/f/g, '').length")
        assert used >= 1920
        page.screenshot(path=str(shots / "cluster-1000-nodes.png"))
        # one more gang: only its GPUs change, the page polls it in
        renders = o.renders()
        t1 = time.perf_counter()
        drive.schedule_gang(client, pods, names, "vc1/late", "vc1", 2, 8)
        held = drive.placement(client, "vc1/late")
        page.wait_for_function(f"window.topogangUI.renders > {renders}")
        wait_classes(page, held, "u")
        live_s = time.perf_counter() - t1
        changed = page.evaluate("window.topogangUI.changedGpus")
        update_ms = page.evaluate("window.topogangUI.lastUpdateMs")
        page.locator('#gangs tr.gang[data-gang="vc1/late"]').wait_for()
        # click → highlight → two animation frames (style, layout and paint of 8,000 GPUs), in-page
        click_ms = page.evaluate(
            """async () => {
                const t = performance.now();
                document.querySelector('#gangs tr.gang[data-gang="vc1/late"]').click();
                await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
                return performance.now() - t;
            }"""
        )
        assert page.locator("#topology .g.hl").count() == 16
        got = page.evaluate(DOM_GPUS, ".hl")
        assert {(r[0], r[1]) for r in got} == held
        page.screenshot(path=str(shots / "cluster-1000-nodes-selected.png"))
        size = len(client.get("/v1/ui/state").content)
        perf = {
            "nodes": 1000,
            "gpus": 8000,
            "usedOrReservedGpus": used,
            "firstPaintSeconds": round(first_render_s, 3),
            "layoutBuildMs": round(stats["build"], 1),
            "firstUpdateMs": round(stats["update"], 1),
            "liveUpdateMs": round(update_ms, 1),
            "liveUpdateChangedGpus": changed,
            "bindToColourSeconds": round(live_s, 3),
            "clickToHighlightPaintedMs": round(click_ms, 1),
            "stateDocumentBytes": size,
        }
        (shots / "perf-1000-nodes.json").write_text(json.dumps(perf, indent=2) + "\n")
        print("cluster view, 1,000 nodes:", json.dumps(perf))
        assert changed >= 16
        assert o.errors == []
        ctx.close()
