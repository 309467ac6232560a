"""The simulator's PNG plots (when matplotlib is installed: it is in the `load` extra, not a core
dependency, so every import of it is inside the function that draws)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadtest.simulate.metrics import PolicyMetrics
from loadtest.simulate.runinfo import RunInfo, ordered

PLOTS = ("queueing_cdf.png", "vc_p95.png", "gpus_over_time.png")

# One look per policy in every plot. Lines that coincide (hived-like often matches private, or
# topogang) stay visible: different dashes and markers, and the thinner, dashed lines drawn on top.
STYLES: dict[str, dict[str, Any]] = {
    "topogang": {"color": "tab:blue", "linestyle": "-", "linewidth": 2.4, "zorder": 2},
    "hived-like": {"color": "tab:orange", "linestyle": "--", "linewidth": 1.6, "marker": "o", "zorder": 5},
    "first-fit": {"color": "tab:green", "linestyle": "-.", "linewidth": 1.4, "marker": "s", "zorder": 4},
    "first-fit-elastic": {"color": "tab:red", "linestyle": ":", "linewidth": 1.8, "marker": "^", "zorder": 4},
    "private": {"color": "tab:purple", "linestyle": "-", "linewidth": 3.4, "alpha": 0.45, "zorder": 1},
    "kueue-like": {"color": "tab:brown", "linestyle": (0, (5, 1, 1, 1)), "marker": "D", "zorder": 4},
}


def color_of(name: str) -> str:
    """Its own colour, or a spare no listed policy has (matplotlib's first colour is topogang's blue)."""
    own = STYLES.get(name, {}).get("color")
    return str(own or ("olive", "cyan", "pink", "gray")[sum(map(ord, name)) % 4])


def _style(name: str, markers: bool = True) -> dict[str, Any]:
    style = dict(STYLES.get(name, {"linestyle": "-", "zorder": 3, "color": color_of(name)}))
    if markers and "marker" in style:
        style.update(markersize=4, markevery=0.1)
    else:
        style.pop("marker", None)
    return style


def queueing_cdf_figure(m: Mapping[str, PolicyMetrics]) -> Any:
    """The queueing-delay CDFs, all jobs and multi-GPU jobs."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, group, title in zip(axes, ("all", "multi"), ("all jobs", "multi-GPU jobs"), strict=True):
        for n in ordered(m):
            v = sorted(x / 3600 for x in m[n].queueing_values.get(group, []))
            if not v:
                continue
            ys = [(i + 1) / len(v) for i in range(len(v))]
            ax.step(v, ys, where="post", label=n, **_style(n))
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xlabel("queueing delay (hours, symlog)")
        ax.set_ylabel("share of jobs")
        ax.set_title(f"Queueing delay CDF, {title}")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


def vc_p95_figure(info: RunInfo, m: Mapping[str, PolicyMetrics]) -> Any:
    """Per-VC p95 queueing, one bar per policy; a bar of height 0 is labelled "0" so it is seen."""
    import matplotlib.pyplot as plt

    names = ordered(m)
    vcs = sorted({vc for x in m.values() for vc in x.per_vc})
    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        vals = []
        for vc in vcs:
            d = m[n].per_vc.get(vc, {}).get("all")
            vals.append(0.0 if d is None else d.p95 / 3600)
        xs = [k + (i - (len(names) - 1) / 2) * width for k in range(len(vcs))]
        color = color_of(n)
        ax.bar(xs, vals, width, label=n, color=color, edgecolor=color)
        for x, v in zip(xs, vals, strict=True):
            if v == 0:
                ax.annotate(
                    "0",
                    (x, 0),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    fontsize=7,
                    color=color,
                )
    ax.set_xticks(range(len(vcs)))
    ax.set_xticklabels([f"{vc}\n({info.cluster.quotas.get(vc, 0)} nodes)" for vc in vcs], fontsize=8)
    ax.set_ylabel("p95 queueing (hours; 0 marked)")
    ax.set_title("Per-VC p95 queueing: shared policies vs each VC's private cluster")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def gpus_over_time_figure(info: RunInfo, m: Mapping[str, PolicyMetrics]) -> Any:
    """Allocated and stranded GPUs over time, with the cluster's capacity as a labelled line."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    total = info.cluster.total_gpus
    axes[0].axhline(total, color="black", linewidth=0.8, label=f"capacity ({total} GPUs)")
    for n in ordered(m):
        s = m[n].series
        days = [h / 24 for h in s.get("hours", [])]
        style = {**_style(n, markers=False), "linewidth": 1}
        axes[0].plot(days, s.get("allocated", []), label=n, **style)
        axes[1].plot(days, s.get("stranded", []), label=n, **style)
    end = info.window_hours / 24
    for ax, label in zip(axes, ("allocated GPUs", "stranded GPUs"), strict=True):
        ax.axvline(end, color="grey", linestyle=":", linewidth=1, label="last submit")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right")
    axes[0].set_title("GPUs over time (bin averages)")
    axes[1].set_xlabel("days since the first submit")
    fig.tight_layout()
    return fig


def plot(out: Path, info: RunInfo, m: Mapping[str, PolicyMetrics]) -> list[str]:
    """Write the PNGs; return their file names (empty when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    figures = (queueing_cdf_figure(m), vc_p95_figure(info, m), gpus_over_time_figure(info, m))
    for name, fig in zip(PLOTS, figures, strict=True):
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
    return list(PLOTS)
