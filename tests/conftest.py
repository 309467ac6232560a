"""Suite-wide: what running the suite in parallel (`make test`: pytest-xdist, `--dist loadfile`) needs.

Order. A worker runs a whole test module (so its module-scoped servers and the fresh clone are made
once), and xdist hands the modules out in collection order. The modules holding the longest tests
(the fresh clone, the soak, a cold image build) are moved first, so none of them starts last and ends
the run alone. A plain `pytest` (one process) keeps the usual order. (The e2e tests share one control
plane across modules: `make test` runs them in a second, single-process pytest.)

Banners. Several conftests print a banner at the end of the run when a whole area is skipped (no
browser, no helm, no image tools: reasons written in capitals, "... SKIPPED: why"). Under xdist those
conftests run in the workers, whose end-of-run summaries nobody sees; the controller only gets each
test's report. So the controller collects those reasons from the reports and prints each once.
Likewise the figures a test records as a "summary" property (the image's size), in either mode.
"""

from __future__ import annotations

import pytest

LONG = ("clone", "soak", "image")  # markers of the longest tests (the image: when built cold)

_banners: list[str] = []
_summaries: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):
        # stable: every worker collects the same order, as xdist requires
        items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in LONG))


def _distributed(config: pytest.Config) -> bool:
    """The xdist controller of a parallel run (not a worker, not a plain single-process run)."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # a figure a test reports for the reader (`record_property("summary", ...)`), e.g. the image's size
    _summaries.extend(str(value) for name, value in report.user_properties if name == "summary")
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    if "SKIPPED" in reason and reason not in _banners:
        _banners.append(reason)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for line in dict.fromkeys(_summaries):  # a report's properties come with each of its phases
        terminalreporter.write_line(line, bold=True)
    if not _distributed(config):
        return  # each area's own conftest prints its banner
    for why in _banners:
        terminalreporter.write_sep("!", why, yellow=True, bold=True)
