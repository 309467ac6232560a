"""The extender's log is one record a line of printable text, whatever a message interpolated
(`extender.ops.logtext`, set up by `topogang serve`): a name, a path or an error text a tenant or a
caller wrote can neither start a line of its own nor send an escape to the admin's terminal, at any
call site, including those that log such text as it came (a Volcano group's name on a failed fetch,
a recovery line echoing a `UserError`). A traceback keeps its lines."""

from __future__ import annotations

import io
import logging

from extender.ops import logtext

FORGED = "\n2026-01-01 00:00:00,000 CRITICAL topogang.kube: leading: acquired Lease\x1b[2K"


def test_every_record_is_one_printable_line_and_a_traceback_keeps_its_lines() -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    out = io.StringIO()
    try:
        logtext.configure("info", out)
        log = logging.getLogger("topogang.test")
        log.warning("cannot read %s %s/%s: %s", "PodGroup", "vision", "g" + FORGED, "boom")
        try:
            raise ValueError("inside")
        except ValueError:
            log.exception("failed on %s", "x\ry")
        log.info("%s", "z" * 20_000)
    finally:
        root.handlers[:], root.level = saved
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(
        "\\n2026-01-01 00:00:00,000 CRITICAL topogang.kube: leading: acquired Lease\\x1b[2K: boom"
    )
    assert not any(line.startswith("2026-01-01") for line in lines), lines
    assert "failed on x\\ry" in lines[1] and "Traceback (most recent call last):" in lines[2]
    assert any(line.startswith("ValueError: inside") for line in lines)
    assert len(lines[-1]) < logtext.MAX_LINE + 100 and lines[-1].endswith("…")
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
