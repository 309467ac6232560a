"""Browser tests of the cluster view: headless Debian Chromium driven by Playwright.

Playwright's Python wheel bundles its driver; its own browser download (`playwright install`) is
never used: the tests launch the system's /usr/bin/chromium (`apt-get install -y chromium`, which
.ci/run does when it runs as root). Without it the browser tests skip, loudly: the skip reason says
what is missing, and the end of the run prints a banner.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "results" / "ui"
CHROMIUM = os.environ.get("TOPOGANG_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

_skipped: list[str] = []


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)) and shutil.which(CHROMIUM) is None:
        return (
            f"BROWSER TESTS SKIPPED: {CHROMIUM} is absent. Install Debian's chromium "
            "(`apt-get update && apt-get install -y chromium`, as root; .ci/run does it) to run tests/ui."
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return (
            "BROWSER TESTS SKIPPED: the Python `playwright` package is missing "
            "(`pip install -e '.[dev]'`; never `playwright install`)."
        )
    return None


def skip_without_browser() -> None:
    why = browser_missing()
    if why is not None:
        if why not in _skipped:
            _skipped.append(why)
        pytest.skip(why)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for why in _skipped:
        bar = "!" * min(100, len(why))
        terminalreporter.write_line(bar, red=True, bold=True)
        terminalreporter.write_line(why, red=True, bold=True)
        terminalreporter.write_line(bar, red=True, bold=True)


# module, not session: Playwright's sync API keeps an event loop running in this thread while it is
# open, so every asyncio.run() after it fails; under xdist (`make test`) other modules may follow
# tests/ui in the same worker, and a module fixture is closed before they start
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    skip_without_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS
