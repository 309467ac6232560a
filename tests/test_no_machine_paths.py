"""No tracked file names a location on one particular machine.

A clone from a Git host has no build machine's home, work or scratch directories, so a command, doc
or comment that points there is broken for everybody else. What counts as a machine path: an
absolute path under a user's or a machine's own directories (home directories, a work area, mounts,
scratch space). Not counted: system install locations that are the same on every machine of a
distribution (the Debian chromium binary, the Go toolchain's default prefix), and the few
container-internal paths listed in `ALLOWED`, which name a place inside an image or a pod.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Every path in this file is written in pieces ("/" + "tmp/..."), so the file passes its own rule.
MACHINE_DIRS = ("work", "root", "home", "Users", "tmp", "mnt", "var/folders", "private/var", "srv")
# An absolute path starts a token: not a URL's path ("http://host/work/...") nor a relative one
# ("../x/work/", "~/work/").
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:" + "|".join(map(re.escape, MACHINE_DIRS)) + r")/[^\s`'\"),;]*")
SIBLING_CHECKOUT = re.compile(r"\.\./shared\b")  # files beside the repository, absent from a clone

# (file, path): container-internal locations, the same wherever the image or pod runs.
ALLOWED = {
    ("Dockerfile", "/" + "tmp/requirements.txt"),  # scratch file of the image build
    ("extender/gangs/barrier.py", "/" + "mnt/frameworkbarrier"),  # FrameworkBarrier's output dir in the pod
}


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
    ).stdout
    return [p for p in out.decode().split("\0") if p]


def offending(name: str, text: str) -> list[str]:
    paths = (m.group(0).rstrip(".:") for m in MACHINE_PATH.finditer(text))  # not a sentence's end
    found = [p for p in paths if (name, p) not in ALLOWED]
    return found + [m.group(0) for m in SIBLING_CHECKOUT.finditer(text)]


def test_no_tracked_file_names_a_machine_path() -> None:
    problems = []
    for name in tracked_files():
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary (the UI screenshot), or deleted in the work tree
        problems += [f"{name}: {p}" for p in offending(name, text)]
    assert problems == [], "machine paths in tracked files:\n" + "\n".join(problems)


def test_the_rule_catches_machine_paths_and_spares_portable_ones() -> None:
    home, work = "/" + "home/alice/x.md", "/" + "work/shared/reference/e2e-cluster.md"
    assert offending("README.md", f"see {home}, and `{work}`.") == [home, work]
    assert offending("a.sh", "cd .." + "/shared/traces") == [".." + "/shared"]
    assert offending("Dockerfile", "rm /" + "tmp/requirements.txt") == []
    assert offending("other/Dockerfile", "rm /" + "tmp/requirements.txt") != []
    portable = "/usr/bin/chromium /usr/local/go/bin/go ~/.cache/x https://example.org/" + "home/x ./tmp/y"
    assert offending("README.md", portable) == []


# `reference/NAME.md` notes live beside the repository while it is written, not in it: a shipped file
# cites public upstream docs or docs/ instead. (A URL's own `.../reference/...` path is not a citation.)
REFERENCE_NOTE = re.compile(r"(?<![\w./-])reference/[\w.-]+\.md")


def test_no_file_cites_reference_notes_missing_from_the_repository() -> None:
    found = [
        f"{name}: {match}"
        for name in tracked_files()
        if (ROOT / name).is_file() and name != "tests/test_no_machine_paths.py"
        for match in REFERENCE_NOTE.findall((ROOT / name).read_text(encoding="utf-8", errors="replace"))
        if not (ROOT / match).exists()
    ]
    assert found == []
