"""The bench's scaling table: in-process decisions/s (`loadtest.bench_core`), HTTP filter p99 and
the extender's RSS at 100, 1,000 and 5,000 nodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadtest.measure import median_run, rss_mib
from loadtest.servers import Server, Setup, alternate, prefill, serve_extender, serve_noop

SCALING_NODES = (100, 1000, 5000)


def rack_size_for(nodes: int) -> int:
    """Racks of 8 nodes when they divide the cluster, else the next size that does (100 -> 10)."""
    return next(r for r in range(8, nodes + 1) if nodes % r == 0) if nodes >= 8 else nodes


def format_scaling(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "scaling (in-process: loadtest.bench_core, Philly mix; HTTP: 16 users, 4x8-GPU gangs, pre-filled):",
        f"{'nodes':>6} {'rack':>5} {'decisions/s':>12} {'vs first-fit':>13} {'fill':>5} "
        f"{'filter p99 ms':>14} {'no-op p99 ms':>13} {'RSS MiB':>8}",
    ]
    for r in rows:
        rss = f"{r['rss_mib']:.0f}" if r.get("rss_mib") else "-"
        p99 = f"{r['filter_p99_ms']:.2f}" if r.get("filter_p99_ms") is not None else "-"
        base = f"{r['noop_p99_ms']:.2f}" if r.get("noop_p99_ms") is not None else "-"
        fill = f"{r['fill']:.0%}" if r.get("fill") is not None else "-"
        lines.append(
            f"{r['nodes']:>6} {r['rack_size']:>5} {r['core_rate']:>12,.0f} {r['ratio']:>12.2f}x {fill:>5} "
            f"{p99:>14} {base:>13} {rss:>8}"
        )
    return "\n".join(lines)


def scaling_rows(
    s: Setup,
    main_nodes: int,
    fill: float,
    config_for: Callable[[int], Path],
    ext: Server,
    noop: Server,
    rss: float,
    main_fill: float,
    say: Callable[[str], None],
    rows: list[dict[str, Any]],
) -> None:
    """In-process decisions/s, HTTP filter p99 (one shorter run each, 16 users) and RSS per size;
    the main size reuses the main runs. Appends to `rows` as it goes."""
    from loadtest.bench_core import bench as core_bench

    short = replace(s, seconds=max(5, s.seconds * 2 // 3))
    for nodes in SCALING_NODES:
        say(f"scaling at {nodes} nodes ...")
        r = core_bench(nodes, fill, 3000, 7, rack_size=rack_size_for(nodes))
        row: dict[str, Any] = {
            "nodes": nodes,
            "rack_size": rack_size_for(nodes),
            "core_rate": r["core_rate"],
            "ratio": r["ratio"],
        }
        if nodes == main_nodes and ext.runs.get(16) and noop.runs.get(16):
            row["filter_p99_ms"] = median_run(ext.runs[16]).verbs["filter"].p99
            row["noop_p99_ms"] = median_run(noop.runs[16]).verbs["filter"].p99
            row["rss_mib"] = rss
            row["fill"] = main_fill
        else:
            srv = serve_extender(short, config_for(nodes), f"topogang-{nodes}")
            base = serve_noop(short, config_for(nodes), f"noop-{nodes}")
            try:
                row["fill"] = prefill(srv, fill)
                alternate(short, [base, srv], (16,), 1, say)
                row["rss_mib"] = rss_mib(srv.proc.pid)
            finally:
                s.kids.stop(base.proc)
                s.kids.stop(srv.proc)
            row["filter_p99_ms"] = srv.runs[16][0].verbs["filter"].p99
            row["noop_p99_ms"] = base.runs[16][0].verbs["filter"].p99
        rows.append(row)
