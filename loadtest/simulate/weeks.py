"""Several weeks side by side: one `topogang simulate` run per week, then one table of the goals.

    python -m loadtest.simulate.weeks --trace FILE --out DIR [--weeks N] START [START ...] [-- OPTIONS]

Each START (YYYY-MM-DD) is simulated as `topogang simulate --trace FILE --week START --weeks N
--out DIR/START OPTIONS`; `DIR/goals.md` then holds every goal's measured value and PASS/FAIL, one
column per week, and the wall time of each run. `shipped` as a START runs the week shipped with the
package instead (no --trace needed for it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from loadtest.simulate.cli import main as simulate_main

SHIPPED = "shipped"


def run_name(start: str, weeks: int) -> str:
    """A run's name and folder: its start, and `+Nw` for a window of N weeks."""
    return start if weeks == 1 else f"{start}+{weeks}w"


def window_error(starts: Sequence[str], weeks: int) -> str | None:
    """Why `--weeks` cannot apply to these starts, or None: the shipped week has nothing after it."""
    if weeks < 1:
        return "--weeks must be positive"
    if weeks > 1 and SHIPPED in starts:
        return f"{SHIPPED} is one week; name its start (2017-10-23) for --weeks"
    return None


def simulate_week(trace: Path | None, start: str, weeks: int, out: Path, extra: list[str]) -> float:
    """`topogang simulate` of the `weeks` weeks from `start` into `out`: its wall time (s)."""
    args = ["--out", str(out), "--no-progress", *extra]
    if start != SHIPPED:
        if trace is None:
            raise SystemExit(f"--trace is needed for week {start}")
        args += ["--trace", str(trace), "--week", start, "--weeks", str(weeks)]
    t0 = time.perf_counter()
    if simulate_main(args) != 0:
        raise SystemExit(f"the run for {start} failed")
    return time.perf_counter() - t0


def table(runs: Sequence[tuple[str, Path, float]]) -> list[str]:
    """Markdown: one row per goal, one column per run (measured value, then PASS/FAIL)."""
    goals: dict[str, dict[str, tuple[str, bool | None]]] = {}
    texts: dict[str, str] = {}
    for label, out, _ in runs:
        for g in json.loads((out / "metrics.json").read_text())["goals"]:
            texts.setdefault(g["id"], f"{g['text']} ({g['target']})")
            goals.setdefault(g["id"], {})[label] = (g["value"], g["passed"])
    verdict = {True: "**PASS**", False: "**FAIL**", None: "n/a"}
    lines = ["| goal | " + " | ".join(label for label, _, _ in runs) + " |"]
    lines.append("|" + "---|" * (len(runs) + 1))
    for gid, per in goals.items():
        cells = []
        for label, _, _ in runs:
            value, passed = per.get(label, ("n/a", None))
            cells.append(f"{verdict[passed]}: {value}")
        lines.append(f"| {gid}: {texts[gid]} | " + " | ".join(cells) + " |")
    lines.append("| wall time of the run (s) | " + " | ".join(f"{w:.1f}" for _, _, w in runs) + " |")
    return lines


def split_options(argv: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """The command's own arguments, and the `topogang simulate` options after `--`."""
    raw = list(sys.argv[1:] if argv is None else argv)
    if "--" not in raw:
        return raw, []
    i = raw.index("--")
    return raw[:i], raw[i + 1 :]


def weeks_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The options every several-weeks command takes: the trace, the output directory, the weeks."""
    ap = argparse.ArgumentParser(prog=prog, description=doc)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("starts", nargs="+", metavar="START", help=f"YYYY-MM-DD, or {SHIPPED}")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    raw, extra = split_options(argv)
    ap = weeks_parser("python -m loadtest.simulate.weeks", __doc__)
    ap.add_argument("--weeks", type=int, default=1)
    args = ap.parse_args(raw)
    why = window_error(args.starts, args.weeks)
    if why is not None:
        ap.error(why)
    runs = []
    for start in args.starts:
        out = args.out / run_name(start, args.weeks)
        runs.append((out.name, out, simulate_week(args.trace, start, args.weeks, out, extra)))
    lines = table(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "goals.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
