"""Print every step's answer next to the table's: `python -m tests.conformance.hived.record [NAME]`.

For reviewing a placement change: the steps whose answer moved are marked `!=`. The table is then
edited by hand (a new answer needs a reason in docs/hived-conformance.md), never rewritten by this.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.conformance.hived.driver import cluster_for
from tests.conformance.hived.test_hived_table import CASES, RUNNABLE, SCENARIOS, expanded, run_step


def main(argv: list[str]) -> int:
    names = argv or RUNNABLE
    moved = 0
    for name in names:
        scenario = SCENARIOS[name]
        print(f"== {name} ({scenario['hived']})")
        edits = scenario.get("config") or []
        with tempfile.TemporaryDirectory() as tmp, cluster_for(CASES, edits, Path(tmp)) as c:
            for i, step in enumerate(expanded(scenario["steps"])):
                if "schedule" in step:
                    got = c.schedule(step["schedule"], c.suggested(step.get("nodes"))).as_expected()
                    same = got == step["expect"]
                    moved += not same
                    mark = "  " if same else "!="
                    print(f"{mark} {i:3} {step['schedule']}: got {got}; table {step['expect']}")
                    continue
                try:
                    run_step(c, step, f"{name}, step {i}")
                    print(f"   {i:3} {step}")
                except AssertionError as err:
                    moved += 1
                    print(f"!= {i:3} {step}: {str(err).splitlines()[0]}")
    print(f"{moved} steps differ from the table")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
