"""Placeholder until this command is implemented; it says so instead of failing obscurely."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def serve_main(argv: Sequence[str] | None = None) -> int:
    print("topogang: this command is not implemented yet", file=sys.stderr)
    return 2
