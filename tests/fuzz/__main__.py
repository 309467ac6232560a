"""`make fuzz`: many seeded hostile requests across every route of a fresh standalone extender.

    python -m tests.fuzz --requests 10000 --seed 1

Starts `topogang serve` on the example cluster (127.0.0.1, a free port), binds the baseline gangs,
sends the requests one after another, then tells the server every fuzzing pod is gone and compares
the placed gangs and the ledger's placed records with what they were before. Prints the requests by
route, the violations by kind (with the first few requests of each), the server's RSS before and
after, and whether the state stayed unchanged. Exits 1 on any violation or on RSS growth over
`--max-growth-mb`; the same seed sends the same requests.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from tests.fuzz.hostile import (
    HANG_SECONDS,
    Context,
    Probe,
    forget_fuzz_pods,
    place_baseline,
    placed_state,
    probe,
    send,
    violations,
)
from tests.integration.conftest import running_server

T = TypeVar("T")
EXAMPLES = 3  # requests shown per kind of violation


class RandomSource:
    """Choices from a seeded `random.Random`: the same seed, the same requests."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, options: Sequence[T]) -> T:
        return self.rng.choice(options)

    def number(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


@dataclass
class Tally:
    sent: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int | None] = field(default_factory=Counter)
    violations: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    slowest: float = 0.0

    def note(self, kind: str, p: Probe, detail: str) -> None:
        self.violations[kind] += 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < EXAMPLES:
            shown.append(f"{p.describe()} -> {detail}")


def rss_mb(pid: int) -> float:
    """The process' resident set (VmRSS) in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def run(requests: int, seed: int, max_growth_mb: float) -> int:
    tally = Tally()
    src, ctx = RandomSource(seed), Context()
    t0 = time.monotonic()
    with running_server() as server, server.client(timeout=HANG_SECONDS) as client:
        pid = server.process.pid
        place_baseline(client, ctx)
        before = placed_state(client)
        if not all(before):
            raise RuntimeError(f"the baseline is not placed: {before}")
        rss_before = rss_mb(pid)
        for i in range(requests):
            p = probe(src, ctx)
            r = send(client, server.url, p)
            tally.sent[p.route] += 1
            tally.statuses[r.status] += 1
            tally.slowest = max(tally.slowest, r.seconds)
            for kind in violations(p, r):
                tally.note(kind, p, f"{r.status} {r.content_type!r} {r.body[:200]!r} {r.error}")
            ctx.heard(p, r)
            if server.process.poll() is not None:
                tally.note("process death", p, f"exit code {server.process.returncode}")
                break
            if (i + 1) % 1000 == 0:
                print(f"... {i + 1} requests, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        alive = server.process.poll() is None
        rss_after = rss_mb(pid) if alive else float("nan")
        unchanged = False
        if alive:
            forget_fuzz_pods(client, ctx)
            after = placed_state(client)
            unchanged = after == before
            if not unchanged:
                for what, old, new in zip(("group", "ledger record"), before, after, strict=True):
                    for doc in [d for d in old if d not in new]:
                        tally.note("state changed", Probe("state"), f"{what} gone or changed: {doc!r:.800}")
                    for doc in [d for d in new if d not in old]:
                        tally.note("state changed", Probe("state"), f"{what} new or changed: {doc!r:.800}")
    growth = rss_after - rss_before
    print(f"fuzz: seed {seed}, {sum(tally.sent.values())} requests in {time.monotonic() - t0:.0f} s")
    print(f"baseline: {len(before[0])} placed affinity groups, {len(before[1])} placed ledger records")
    print("requests by route:")
    for route, n in sorted(tally.sent.items()):
        print(f"  {route:<12} {n:>6}")
    print("replies by status: " + ", ".join(f"{s}: {n}" for s, n in sorted(tally.statuses.items(), key=str)))
    print(f"slowest reply: {tally.slowest:.2f} s (a hang is over {HANG_SECONDS:.0f} s)")
    print("violations by kind:")
    for kind in ("process death", "hang", "5xx", "non-JSON", "no reply", "state changed"):
        print(f"  {kind:<14} {tally.violations[kind]}")
        for example in tally.examples.get(kind, []):
            print(f"      e.g. {example}")
    print(
        f"server RSS: {rss_before:.1f} MB before, {rss_after:.1f} MB after "
        f"({growth:+.1f} MB; at most +{max_growth_mb:.0f})"
    )
    print(f"placed gangs and ledger unchanged: {'yes' if unchanged else 'NO'}")
    failed = sum(tally.violations.values()) > 0 or not growth <= max_growth_mb
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-growth-mb", type=float, default=50.0)
    args = ap.parse_args(argv)
    return run(args.requests, args.seed, args.max_growth_mb)


if __name__ == "__main__":
    sys.exit(main())
