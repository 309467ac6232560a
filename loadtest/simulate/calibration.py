"""kueue-like's calibration against the real Kueue, as the simulator's report shows it.

`data/kueue-calibration.json` is written by `python -m loadtest.kueue_calibration DIR` from a
`make bench-peers` run (the live Kueue arm and the simulator's kueue-like on the same slice and
cluster). The report prints it as measured, says when `kueue.py` has changed since (the figures
then describe an earlier imitation), and points to `kueue.py`'s docstring for why lines differ.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CALIBRATION_FILE = HERE / "data" / "kueue-calibration.json"
KUEUE_SOURCE = HERE / "kueue.py"
TOLERANCE = 0.10  # lines further apart than this are "apart" (issue: "differ by more than 10%")


def load(path: Path = CALIBRATION_FILE) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _fmt(unit: str, v: float | None) -> str:
    if v is None:
        return "-"
    if unit == "share":
        return f"{v:.1%}"
    if unit == "h":
        return f"{v:.2f}"
    return f"{v:.1f}" if unit == "gpus" else f"{v:.0f}"


def markdown_lines(doc: dict[str, Any] | None, source: Path = KUEUE_SOURCE) -> list[str]:
    """The report's section: the table, the run it came from, and whether kueue.py changed since."""
    if doc is None:
        return []
    current = hashlib.sha256(source.read_bytes()).hexdigest()
    lines = [
        "## kueue-like against the real Kueue",
        "",
        f"Measured by `make bench-peers` (Kueue {doc.get('kueue', '?')} on the e2e control plane, KWOK "
        f"nodes, the simulator's cluster): {doc.get('slice', '?')}, {doc.get('jobs', '?')}, "
        f"{doc.get('factor', '?')}. Rows more than {doc.get('tolerance', TOLERANCE):.0%} apart are marked; "
        "why they differ, and what kueue-like does not model, is in `loadtest/simulate/kueue.py`. "
        "Regenerate: `" + str(doc.get("command", "")) + "`.",
    ]
    if doc.get("kueue_like_sha256") != current:
        lines += [
            "",
            "**kueue-like has changed since this calibration** (its sha256 differs): the kueue-like column "
            "describes the imitation as it was then.",
        ]
    lines += ["", *_run_lines(doc)]
    rec = doc.get("recorded_run")
    if rec:
        lines += ["", "A second run, which recorded Kueue's Workloads:", "", *_run_lines(rec)]
    return lines


def _run_lines(doc: dict[str, Any]) -> list[str]:
    wi = doc.get("what_if")
    lines = [f"Machine load during the Kueue arm: {_load(doc.get('load'))}."]
    if wi:
        lines.append(
            f"What-if: kueue-like with the live control plane's delays in trace time ({wi['lag_s']:.1f} s "
            f"from submit to queued, {wi['gap_s']:.3f} s between admissions, {wi['requeue_s']:g} s requeue "
            f"batch, real seconds x the factor; {wi['source']}): how much of the gap they account for."
        )
    head = "| metric | real Kueue | kueue-like | kueue-like / real |" + (" what-if |" if wi else "")
    lines += ["", head, "|---|---|---|---|" + ("---|" if wi else "")]
    extra = wi["rows"] if wi else [None] * len(doc.get("rows", []))
    for r, w in zip(doc.get("rows", []), extra, strict=False):
        ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.2f}x"
        if r.get("apart"):
            ratio += " (apart)"
        cells = [r["metric"], _fmt(r["unit"], r["real"]), _fmt(r["unit"], r["kueue_like"]), ratio]
        if wi:
            cells.append(_fmt(r["unit"], w))
        lines.append("| " + " | ".join(cells) + " |")
    pipe = doc.get("pipeline")
    if pipe:
        parts = [
            f"{what} p50 {pipe[key]['p50']:.1f} s, p95 {pipe[key]['p95']:.1f} s"
            for what, key in (
                ("submit to Workload", "submit_to_workload_s"),
                ("Workload to quota reserved", "workload_to_quota_s"),
                ("quota to the last pod bound", "quota_to_bound_s"),
            )
            if pipe.get(key)
        ]
        lines += [
            "",
            "Live, per job (real seconds): " + "; ".join(parts) + f"; at most "
            f"{pipe['most_admissions_in_one_second']} Workloads given quota in one second.",
        ]
    imm = (doc.get("immediate_starts") or {}).get("live_first_start_s")
    if imm:
        lines.append(
            f"The {imm['n']} jobs kueue-like starts on arrival started live after p50 {imm['p50']:.1f} s, "
            f"p95 {imm['p95']:.1f} s (real)."
        )
    return lines


def _load(x: Any) -> str:
    if isinstance(x, dict):
        return ", ".join(f"{k} {v}" for k, v in x.items() if v)
    return str(x) if x else "?"
