"""A scheduler on the example cluster whose config file a reload watcher follows: the start of every
test of a reload in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config.load import load_config_text
from extender.http.reload import ConfigWatcher
from extender.http.verbs import Scheduler
from extender.standalone import EXAMPLE_CONFIG
from tests.extender.test_entitlement import make

EXAMPLE = EXAMPLE_CONFIG.read_text(encoding="utf-8")


def watched(tmp_path: Path, text: str = EXAMPLE, **kw: Any) -> tuple[Scheduler, ConfigWatcher, Path]:
    """The scheduler (`test_entitlement.make`'s, with `kw`) on `text` written to a file under
    `tmp_path`, the watcher of that file on the scheduler's clock, and the file."""
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    s, _ = make(load_config_text(text, str(path)), **kw)
    return s, ConfigWatcher(s, path, clock=s.clock), path
