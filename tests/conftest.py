"""Suite-wide: what running the suite in parallel (`make test`: pytest-xdist, `--dist loadgroup`) needs.

Groups. A worker runs a whole group, so a fixture shared by a group's tests is set up once: each test
module is a group (its module-scoped servers and the fresh clone are made once), tests/ui and
tests/deploy are one group each (one browser; one helm build), and every e2e test is in one group (one
control plane). The groups holding the longest tests (e2e, the fresh clone, the soak, a cold image
build) are handed out first, so none of them starts last and ends the run alone. A plain `pytest` (one
process) is unchanged.

Banners. Several conftests print a banner at the end of the run when a whole area is skipped (no
browser, no helm, no image tools: reasons written in capitals, "... SKIPPED: why"). Under xdist those
conftests run in the workers, whose end-of-run summaries nobody sees; the controller only gets each
test's report. So the controller collects those reasons from the reports and prints each once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ONE_GROUP_DIRS = ("ui", "deploy")  # session fixtures shared across their modules
LONG = ("e2e", "clone", "soak", "image")  # markers of the longest tests (the image: when built cold)

_banners: list[str] = []


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return  # not an xdist worker: nothing to group
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if item.get_closest_marker("e2e") is not None:
            group = "e2e"
        else:
            rel = item.path.resolve().relative_to(TESTS)
            group = rel.parts[0] if rel.parts[0] in ONE_GROUP_DIRS else rel.as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
    # stable: every worker collects the same order, as xdist requires
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in LONG))


def _distributed(config: pytest.Config) -> bool:
    """The xdist controller of a parallel run (not a worker, not a plain single-process run)."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    if "SKIPPED" in reason and reason not in _banners:
        _banners.append(reason)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if not _distributed(config):
        return  # each area's own conftest prints its banner
    for why in _banners:
        terminalreporter.write_sep("!", why, yellow=True, bold=True)
