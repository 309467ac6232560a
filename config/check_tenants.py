"""Checks of the entitlement keys (`topogang.tenants`, `topogang.defaultEntitlement`) against the VCs
and pinned cells the file defines, and the plain words `topogang validate` says about the result.

An entitlement naming a VC or a pinned cell that does not exist is an error (with a "did you mean"
where one is close): a typo there would silently take a team's quota away, or give it nothing.
A config with no entitlement at all still loads (HiveD's configs have none), but `validate` then
says plainly that every namespace may use every VC at every priority.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from config.names import dns1123_label_error
from config.schema import TopogangModel
from topology.layout import Problem
from topology.spec import ClusterSpec

TENANTS = "topogang.tenants"
DEFAULT = "topogang.defaultEntitlement"
CHART = "the Helm chart sets opportunistic"


def _hint(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_tenants(spec: ClusterSpec, extras: TopogangModel) -> list[Problem]:
    """Every problem of the `tenants` entries: namespace names, VCs, pinned cells."""
    vcs = [vc.name for vc in spec.virtual_clusters]
    owner = {pid: vc.name for vc in spec.virtual_clusters for pid in vc.pinned_cell_ids}
    default_vcs = dict(spec.namespace_vcs)
    out: list[Problem] = []
    for ns, tenant in extras.tenants.items():
        base = f"{TENANTS}.{ns}"
        err = dns1123_label_error(ns)
        if err:
            out.append(Problem(base, f"invalid namespace name: {err}"))
        allowed = set(tenant.virtual_clusters)
        if ns in default_vcs:
            allowed.add(default_vcs[ns])
        for i, vc in enumerate(tenant.virtual_clusters):
            if vc not in vcs:
                out.append(
                    Problem(
                        f"{base}.virtualClusters[{i}]",
                        f"VC {vc!r} is not defined in virtualClusters{_hint(vc, vcs)}",
                    )
                )
        for j, pid in enumerate(tenant.pinned_cell_ids or ()):
            where = f"{base}.pinnedCellIds[{j}]"
            vc_of = owner.get(pid)
            if vc_of is None:
                out.append(
                    Problem(
                        where, f"pinned cell {pid!r} is not listed in any VC's pinnedCells{_hint(pid, owner)}"
                    )
                )
            elif vc_of not in allowed:
                out.append(
                    Problem(
                        where,
                        f"pinned cell {pid!r} belongs to VC {vc_of!r}, which namespace {ns} may not use: "
                        f"add {vc_of!r} to {base}.virtualClusters",
                    )
                )
    return out


def mode_of(extras: TopogangModel, flag: str = "open") -> str:
    """The mode for namespaces without a `tenants` entry: the file's key, else the serve flag's."""
    return extras.default_entitlement or flag


def entitlement_notice(extras: TopogangModel) -> str | None:
    """What `topogang validate` says when the file leaves namespaces unrestricted (a line of the
    summary, not a load warning: `serve --default-entitlement` may still close them)."""
    mode = extras.default_entitlement
    if mode not in (None, "open"):
        return None
    rest = " without a topogang.tenants entry" if extras.tenants else ""
    how = "" if mode == "open" else f" unless `topogang serve --default-entitlement` says otherwise ({CHART})"
    return (
        f"NOTE: every namespace{rest} may use every VC, every pinned cell and every priority{how}; "
        f"set {DEFAULT}: opportunistic (or none) and list teams under {TENANTS} to keep tenants apart"
    )


def entitlement_data(spec: ClusterSpec, extras: TopogangModel) -> dict[str, object]:
    """The summary's view: the mode and each namespace's entitlement (JSON-ready)."""
    default_vcs = dict(spec.namespace_vcs)
    tenants = {}
    for ns, t in sorted(extras.tenants.items()):
        vcs = sorted({*t.virtual_clusters, *([default_vcs[ns]] if ns in default_vcs else [])})
        pins = None if t.pinned_cell_ids is None else sorted(t.pinned_cell_ids)
        reserved = extras.default_max_reserved_gpus if t.max_reserved_gpus is None else t.max_reserved_gpus
        tenants[ns] = {
            "virtualClusters": vcs,
            "maxPriority": t.max_priority,
            "pinnedCellIds": pins,
            "maxReservedGpus": reserved,
        }
    return {
        "defaultEntitlement": extras.default_entitlement,
        "defaultMaxReservedGpus": extras.default_max_reserved_gpus,
        "tenants": tenants,
        "notice": entitlement_notice(extras),
    }
