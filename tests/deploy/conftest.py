"""helm for the chart tests, built from Go modules by scripts/e2e/build-bins.sh (~/.cache/topogang-e2e).

When it is not built yet: with TOPOGANG_E2E=1 (`.ci/run` sets it whenever Go is installed) the fixture builds
it (minutes cold, seconds once Go's caches are warm) and a failed build fails the tests; otherwise the tests
that need helm skip, and the end of the run says so in a banner.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from scripts import manifests
from tests.e2e.conftest import go_binary

_skipped: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skipped:
        terminalreporter.write_sep("!", _skipped[0], yellow=True, bold=True)


def _skip(reason: str) -> None:
    if not _skipped:
        _skipped.append(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    found = manifests.helm_binary()
    if found is not None:
        return found
    how = "`bash scripts/e2e/build-bins.sh helm` builds it from Go modules (.ci/run does)"
    if os.environ.get("TOPOGANG_E2E") != "1":
        _skip(f"HELM CHART TESTS SKIPPED: helm is not built; {how}, or run with TOPOGANG_E2E=1.")
    go = go_binary()
    if go is None:
        _skip(f"HELM CHART TESTS SKIPPED: TOPOGANG_E2E=1 but no Go toolchain to build helm; {how}.")
    assert go is not None
    log = tmp_path_factory.mktemp("helm") / "build-bins.log"
    with log.open("w", encoding="utf-8") as out:
        built = subprocess.run(
            ["bash", str(manifests.REPO / "scripts" / "e2e" / "build-bins.sh"), "helm"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": f"{os.environ.get('PATH', '')}{os.pathsep}{Path(go).parent}"},
            timeout=3600,
            check=False,
        )
    found = manifests.helm_binary()
    if built.returncode != 0 or found is None:
        pytest.fail(
            f"scripts/e2e/build-bins.sh helm failed (rc={built.returncode}), log {log}", pytrace=False
        )
    return found
