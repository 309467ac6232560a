"""A start that refuses the config logs one record (`StartConfig._refuse`), and the log cuts a
record at `logtext.MAX_LINE`, an Event at 512 characters: the digest to confirm and how come first,
then the costs of every gang. Before, the costs came first, and a few dozen gangs with pods on nodes
the config dropped (a gang's key alone may be 512 characters) pushed the digest out of both, although
README says "the digest, printed by the refusal"."""

from __future__ import annotations

import asyncio
import io
import logging

from config.against import config_digest
from extender.kube.recovery_report import RecoveryReport
from extender.kube.start_config import StartConfig
from extender.ops import logtext
from tests.extender.helpers import example


def test_a_long_start_refusal_keeps_its_digest_in_the_log() -> None:
    loaded = example()
    digest = config_digest(loaded)
    report = RecoveryReport()
    for i in range(60):
        pods = ", ".join(f"train-{j} on node-{i}-{j}" for j in range(4))
        report.off_config.append(
            (f"team-{i}/job-{i:03d}", f"4 pods run on nodes the config does not have ({pods})")
        )
    told: list[str] = []
    start = StartConfig(loaded, lambda *a: asyncio.sleep(0), told.append)
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    out = io.StringIO()
    try:
        logtext.configure("info", out)
        asyncio.run(start.judge(report))
    finally:
        root.handlers[:], root.level = saved
    assert start.refusal and digest in start.refusal
    logged = out.getvalue()
    assert f"write {digest} to the file confirm-capacity-loss" in logged, (
        f"the refusal's log line ({len(logged)} characters) ends {logged[-120:]!r}: no digest to confirm"
    )
