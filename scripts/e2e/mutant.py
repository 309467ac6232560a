"""A deliberately broken extender, to check that the e2e suite notices when a guarantee is lost.

A test suite that stays green against a broken extender proves nothing. This wrapper patches one
guarantee out of the extender in-process, then runs the normal `topogang` CLI with the same
arguments, so the e2e fixtures can start it in place of the real one:

    TOPOGANG_E2E=1 TOPOGANG_E2E_EXTENDER=".venv/bin/python scripts/e2e/mutant.py" \\
        .venv/bin/pytest tests/e2e/test_gangs.py          # expect failures: that is the point
    TOPOGANG_MUTANT=ignore-node-health TOPOGANG_E2E=1 TOPOGANG_E2E_EXTENDER=... pytest ...

TOPOGANG_MUTANT picks the breakage (default `partial-gang`):

- `partial-gang`: gang atomicity is gone. When a multi-pod gang cannot be placed whole, the member
  being filtered is placed alone instead (a one-pod gang of its own), as a scheduler without gang
  support would, so members of a gang that does not fit bind one by one wherever there is room.
- `ignore-node-health`: every node is taken as healthy, so NotReady and cordoned nodes stay in use.

Never used by the test suite itself; tests/extender/test_mutant.py checks that each breakage
still takes effect, so a refactor cannot quietly turn this tool into a no-op.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from extender.gangs.podspec import PodRequest, spec_text  # noqa: E402
from extender.http import wire  # noqa: E402  (the repository must be importable first)
from extender.http.verbs import Scheduler  # noqa: E402
from topology.core import Core  # noqa: E402
from topology.decisions import Member  # noqa: E402

Undo = Callable[[], None]


def _solo(pr: PodRequest) -> PodRequest:
    """The member as a one-pod gang of its own: the gang it belonged to is forgotten."""
    req = replace(
        pr.request,
        name=f"{pr.gang}/mutant-solo/{pr.name}",
        members=(Member(1, pr.leaf_number),),
        slot_keys=None,
    )
    return replace(pr, request=req, slot_key=None)


def partial_gang() -> Undo:
    original_filter = Scheduler.filter
    original_request_of = Scheduler.request_of
    solo: dict[str, PodRequest] = {}  # pod UID -> its one-pod request, once it was split off

    async def request_of(self: Scheduler, pod: wire.WirePod) -> PodRequest:
        got = solo.get(pod.uid)
        return got if got is not None else await original_request_of(self, pod)

    async def filter(self: Scheduler, args: wire.ExtenderArgs) -> dict[str, Any]:
        answer = await original_filter(self, args)
        if answer.get("Error") or answer.get("NodeNames") or (answer.get("Nodes") or {}).get("items"):
            return answer
        uid = args.pod.uid
        pr = self.cached(uid)
        if pr is None or uid in solo or pr.request.pod_count <= 1 or self.core.gang(pr.gang) is not None:
            return answer  # placed (another member's slot was free) or already split off
        # The whole gang waits: place this member alone instead (nor does the gang wait any more,
        # so its VC's order does not queue the member behind its own gang).
        solo[uid] = one = _solo(pr)
        self.waiting.pop(pr.gang, None)
        self.pods.remember(one, spec_text(args.pod.raw)[1])
        return await original_filter(self, args)

    Scheduler.request_of = request_of  # type: ignore[method-assign]
    Scheduler.filter = filter  # type: ignore[method-assign]

    def undo() -> None:
        Scheduler.request_of = original_request_of  # type: ignore[method-assign]
        Scheduler.filter = original_filter  # type: ignore[method-assign]

    return undo


def ignore_node_health() -> Undo:
    original = Core.set_node_health

    def set_node_health(self: Core, node: str, healthy: bool, **kw: Any) -> None:
        original(self, node, True, **kw)

    Core.set_node_health = set_node_health  # type: ignore[method-assign]

    def undo() -> None:
        Core.set_node_health = original  # type: ignore[method-assign]

    return undo


MUTANTS: Mapping[str, Callable[[], Undo]] = {
    "partial-gang": partial_gang,
    "ignore-node-health": ignore_node_health,
}


def apply(name: str) -> Undo:
    """Break the extender in this process; the returned function mends it."""
    try:
        return MUTANTS[name]()
    except KeyError:
        raise SystemExit(
            f"mutant.py: unknown TOPOGANG_MUTANT {name!r} (one of {', '.join(MUTANTS)})"
        ) from None


def main(argv: list[str]) -> int:
    name = os.environ.get("TOPOGANG_MUTANT", "partial-gang")
    apply(name)
    print(f"mutant.py: extender broken on purpose ({name})", file=sys.stderr, flush=True)
    from topogang_cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
