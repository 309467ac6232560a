"""What a config edit does to the gangs that run, judged without I/O.

`topogang diff --against URL NEW` reads the running config (`GET /v1/config`) and the running gangs
(`GET /v1/inspect/affinitygroups`) from the extender; everything here is pure: the running config's
core is rebuilt by adopting each gang where its pods run (as a restart does), and the edit is applied
to it with `topology.reconfigure.reconfigure`, the very call a hot reload makes. Its report's
`impacts` is the one judgement both this diff and the reload's refusal print (`extender/http/reload.py`).

`config_digest` names a config by its content (the parsed model, so comments, key order and the
trailing newline Helm's template may change do not count): a capacity-losing reload is applied only
when the confirmation names this digest, so a confirmation never carries over to a later edit.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from config.diff import config_diff
from config.load import LoadedConfig
from config.untrusted import printable
from topology.core import Core
from topology.decisions import AdoptedPod, GangRequest, Member
from topology.reconfigure import ReconfigureReport, reconfigure

CONFIRM_FILE = "confirm-capacity-loss"  # beside the config file (the chart's ConfigMap key)


def config_digest(loaded: LoadedConfig) -> str:
    """A config's content as 16 hex digits of SHA-256 over its parsed model (canonical JSON)."""
    data = loaded.model.model_dump(mode="json", by_alias=True)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def running_gangs(groups: Sequence[Mapping[str, Any]]) -> list[tuple[GangRequest, list[AdoptedPod]]]:
    """The gangs of `/v1/inspect/affinitygroups` that hold GPUs, as the requests and pods `adopt`
    takes. Waiting gangs hold nothing and are left out; a slot no pod holds is adopted as held."""
    out: list[tuple[GangRequest, list[AdoptedPod]]] = []
    for g in groups:
        status = g.get("status") or {}
        slots = [s for s in status.get("slots") or [] if not s.get("finished")]
        if status.get("state") == "Waiting" or not slots:
            continue
        req = status.get("request") or {}
        sizes = Counter(len(s.get("leafCellIndices") or []) for s in slots)
        request = GangRequest(
            name=str(g["metadata"]["name"]),
            vc=str(status.get("vc", "")),
            members=tuple(Member(n, leaves) for leaves, n in sorted(sizes.items())),
            priority=int(req.get("priority", status.get("priority", 0))),
            leaf_type=req.get("leafCellType"),
            pinned_cell_id=req.get("pinnedCellId"),
            promote_when_quota=bool(req.get("promoteWhenQuota", False)),
        )
        # a gang that runs downgraded (or as opportunistic) holds no quota cell, and comes back so
        no_quota = int(status.get("priority", 0)) < 0
        pods = []
        for s in slots:
            gpus = tuple(int(x) for x in s.get("leafCellIndices") or [])
            pods.append(
                AdoptedPod(
                    str(s.get("podUID") or ""),
                    str(s["node"]),
                    gpus,
                    s.get("podName"),
                    s.get("slotKey"),
                    ("",) * len(gpus) if no_quota else (),
                )
            )
        out.append((request, pods))
    return out


def running_impact(
    running: LoadedConfig, groups: Sequence[Mapping[str, Any]], new: LoadedConfig
) -> ReconfigureReport:
    """The reload's report for `new` on a core running `running` with `groups`' gangs."""
    core = Core(running.spec)
    gangs = running_gangs(groups)
    # guaranteed gangs first, as reconfigure adopts them: they keep their VC cells
    for request, pods in sorted(gangs, key=lambda rp: -rp[0].priority):
        core.adopt(request, pods, 0.0)
    _, report = reconfigure(core, new.spec, 0.0)
    return report


def diff_against(
    running: LoadedConfig, groups: Sequence[Mapping[str, Any]], new: LoadedConfig, source: str
) -> dict[str, Any]:
    """`config_diff` of the running config and `new`, with what the running gangs would lose."""
    out = config_diff(running, new)
    out["old"] = source
    report = running_impact(running, groups, new)
    held = running_gangs(groups)
    out["runningGangs"] = {
        "checked": len(held),
        "losesGuarantee": [i.to_dict() for i in report.impacts if i.loses_guarantee],
        "losesGpus": [i.to_dict() for i in report.impacts if i.kept_gpus < i.gpus],
        "droppedPreemptions": list(report.dropped),
    }
    out["refusedUnlessConfirmed"] = report.loses_capacity
    out["confirmDigest"] = config_digest(new)
    out["changed"] = bool(out["changed"] or report.loses_capacity)
    return out


def _shown(name: object) -> str:
    """A name a tenant chose, as the admin's terminal prints it (a reservation made before names
    were held to printable text may still carry an escape)."""
    return printable(str(name), 1_000)


def format_running(d: Mapping[str, Any]) -> list[str]:
    """The running gangs' part of `diff --against`, as text lines (names a tenant chose, escaped)."""
    r = d["runningGangs"]
    lines = [f"Running gangs: {r['checked']} checked"]
    by_name: dict[str, dict[str, Any]] = {}
    for i in [*r["losesGuarantee"], *r["losesGpus"]]:
        by_name.setdefault(i["gang"], i)
    for i in by_name.values():
        what = []
        if i["losesGuarantee"]:
            what.append("loses its guarantee: moved to opportunistic, preemptible by any guaranteed gang")
        if i["keptGpus"] < i["gpus"]:
            pods = f" (pods {', '.join(_shown(p) for p in i['lostPods'])})" if i["lostPods"] else ""
            lost = "all" if i["keptGpus"] == 0 else f"{i['gpus'] - i['keptGpus']} of"
            what.append(f"loses {lost} its GPUs: they are on hardware the new config does not have{pods}")
        lines.append(f"  ! {_shown(i['gang'])} (VC {i['vc']}, {i['gpus']} GPUs): {'; '.join(what)}")
    lines += [
        f"  ~ {_shown(g)}: its preemption in flight is dropped (retried)" for g in r["droppedPreemptions"]
    ]
    if d["refusedUnlessConfirmed"]:
        lines.append(
            "A hot reload refuses this config unless confirmed: put "
            f"{d['confirmDigest']} in the file {CONFIRM_FILE} beside the config "
            f"(Helm: --set-string confirmCapacityLoss={d['confirmDigest']})"
        )
    elif r["checked"]:
        lines.append("  no running gang loses GPUs or its guarantee")
    return lines
