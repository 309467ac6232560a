"""Suite-wide: keeps the loud skip banners when the suite runs in parallel (`make test`: pytest-xdist).

Several conftests print a banner at the end of the run when a whole area is skipped (no browser, no helm,
no image tools: reasons written in capitals, "... SKIPPED: why"). Under xdist those conftests run in the
workers, whose end-of-run summaries nobody sees; the controller only gets each test's report. So the
controller collects those reasons from the reports and prints each once, as a single process would.
"""

from __future__ import annotations

import pytest

_banners: list[str] = []


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
