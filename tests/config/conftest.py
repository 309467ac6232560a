"""Shared fixtures for the config tests.

The repository root is put on sys.path so `import config` works when pytest runs from a checkout
without the package installed (tests/config has no __init__.py, by design: a `tests/config`
package would shadow the real `config` package).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., str]:
    """Write text to a YAML file in tmp_path and return its path as str."""

    def _write(text: str, name: str = "cfg.yaml") -> str:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        return str(p)

    return _write
