"""`topogang serve` with the ledger's tombstone cap lowered to the first argument and its prune
period to nothing, so a test reaches the cap with a handful of gangs:

    python -m tests.integration.small_ledger CAP serve ...
"""

from __future__ import annotations

import sys

from extender.gangs import ledger


def main() -> int:
    ledger.MAX_TOMBSTONES = int(sys.argv.pop(1))
    ledger.PRUNE_EVERY_SECONDS = 0.0
    from topogang_cli import main as cli

    return cli()


if __name__ == "__main__":
    raise SystemExit(main())
