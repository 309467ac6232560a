"""`topogang validate | generate | schema`: argparse front-ends, one function per sub-command.

Each takes its argv (without the sub-command) and returns the exit code, so the console script wires
each one in a line and tests call them in-process. None of them lets a traceback reach the admin:
every failure becomes `FILE: path: reason` lines and exit code 1 (2 for bad usage).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from config.against import diff_against, format_running
from config.check_tenants import entitlement_data
from config.diff import config_diff, format_diff
from config.fetch import admin_get, list_nodes
from config.from_nodes import (
    DEFAULT_PRODUCT,
    DEFAULT_RACK_LABELS,
    DEFAULT_ZONE_LABELS,
    GPU_RESOURCE,
    PRODUCT_LABEL,
    FromNodesError,
    from_nodes,
    render_yaml,
)
from config.generate import GenerateError, generate_yaml
from config.load import ConfigError, load_config, load_config_text
from config.problems import format_line, format_problem
from config.schema import json_schema
from config.summary import format_summary, summary_data

SCHEMA_FILE = Path(__file__).parent / "schema" / "topogang-config.schema.json"


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parsed arguments, or the exit code argparse chose (--help: 0, bad usage: 2)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def cli_validate(argv: Sequence[str] | None = None) -> int:
    """`topogang validate FILE [FILE...] [--json]`: 0 if every file is valid, else 1."""
    parser = argparse.ArgumentParser(
        prog="topogang validate",
        description="Check topogang/HiveD config files; print a summary of each valid one, or every error.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    results = [_validate_one(f, as_json=args.json) for f in args.files]
    if args.json:
        print(json.dumps({"files": [r for r, _ in results]}, indent=2))
    return 0 if all(ok for _, ok in results) else 1


def _validate_one(file: str, *, as_json: bool) -> tuple[dict[str, Any], bool]:
    result: dict[str, Any] = {"file": file, "valid": False, "errors": [], "warnings": []}
    try:
        loaded = load_config(file)
    except ConfigError as exc:
        result["errors"] = [{"path": p, "message": m} for p, m in exc.errors]
        result["warnings"] = [{"path": w.path, "message": w.message} for w in exc.warnings]
        if not as_json:
            for w in exc.warnings:
                print(format_problem(file, w), file=sys.stderr)
            for line in exc.lines():
                print(line, file=sys.stderr)
        return result, False
    except Exception as exc:  # a bug must still not print a traceback at an admin
        reason = f"internal error while validating ({type(exc).__name__}: {exc}); please report it"
        result["errors"] = [{"path": "", "message": reason}]
        if not as_json:
            print(format_line(file, "", reason), file=sys.stderr)
        return result, False
    data = summary_data(loaded.spec, loaded.analysis)
    data["entitlement"] = entitlement_data(loaded.spec, loaded.extras)
    result.update(
        valid=True, summary=data, warnings=[{"path": w.path, "message": w.message} for w in loaded.warnings]
    )
    if not as_json:
        for line in loaded.warning_lines():
            print(line, file=sys.stderr)
        n = len(loaded.warnings)
        note = f" ({n} warning{'s' if n > 1 else ''})" if n else ""
        print(f"{file}: OK{note}\n")
        print(format_summary(data))
    return result, True


def cli_generate(argv: Sequence[str] | None = None) -> int:
    """`topogang generate [--nodes N] [--gpus-per-node G] [--rack-size R] [--vcs V] [--out FILE]`, or
    `topogang generate --from-cluster [--kubeconfig F] [--rack-label L]... [--zone-label L]...`."""
    parser = argparse.ArgumentParser(
        prog="topogang generate",
        description="Write a synthetic cluster config (racks of nodes, VCs sharing ~90% of the nodes), "
        "or with --from-cluster a starting config read from the cluster's GPU nodes.",
    )
    cluster = parser.add_argument_group("from the cluster's nodes (--from-cluster)")
    cluster.add_argument(
        "--from-cluster", action="store_true", help="read the nodes through the kubeconfig instead"
    )
    cluster.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    cluster.add_argument(
        "--rack-label",
        action="append",
        metavar="LABEL",
        help="node label naming a node's rack; repeat for several (the first a node carries counts); "
        f"'' for no racks (default: {', '.join(DEFAULT_RACK_LABELS)}, NVIDIA's NVLink domain)",
    )
    cluster.add_argument(
        "--zone-label",
        action="append",
        metavar="LABEL",
        help=f"node label naming a node's zone, the level above racks; '' for no zones "
        f"(default: {', '.join(DEFAULT_ZONE_LABELS)})",
    )
    cluster.add_argument("--gpu-resource", default=GPU_RESOURCE, help=f"default: {GPU_RESOURCE}")
    cluster.add_argument(
        "--default-product",
        default=DEFAULT_PRODUCT,
        help=f"GPU type of nodes without {PRODUCT_LABEL} (default: {DEFAULT_PRODUCT})",
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--rack-size", type=int, default=8, help="nodes per rack (must divide --nodes)")
    parser.add_argument("--vcs", type=int, default=4)
    parser.add_argument("--leaf-type", default="A100", help="GPU model name, the leaf cell type")
    parser.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.from_cluster:
        return _from_cluster(args)
    try:
        text = generate_yaml(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            rack_size=args.rack_size,
            vcs=args.vcs,
            leaf_type=args.leaf_type,
        )
    except GenerateError as exc:
        print(f"topogang generate: error: {exc}", file=sys.stderr)
        return 2
    return _write(text, args.out, "topogang generate")


def _from_cluster(args: argparse.Namespace) -> int:
    """Read the nodes, build the config, check it loads, write it; the notes go to stderr."""
    racks = [x for x in args.rack_label or DEFAULT_RACK_LABELS if x]
    zones = [x for x in args.zone_label or DEFAULT_ZONE_LABELS if x]
    try:
        nodes = list_nodes(args.kubeconfig)
    except Exception as exc:  # no kubeconfig, unreachable API server, no right to list nodes, ...
        print(f"topogang generate: error: cannot list the cluster's nodes: {exc}", file=sys.stderr)
        return 1
    try:
        result = from_nodes(
            nodes,
            rack_labels=racks,
            zone_labels=zones,
            gpu_resource=args.gpu_resource,
            default_product=args.default_product,
        )
    except FromNodesError as exc:
        print(f"topogang generate: error: {exc}", file=sys.stderr)
        return 1
    command = " ".join(
        ["topogang generate --from-cluster"]
        + [f"--rack-label {shlex.quote(x)}" for x in racks or [""]]
        + [f"--zone-label {shlex.quote(x)}" for x in zones or [""]]
    )
    text = render_yaml(result, command)
    try:  # what is written must load: a failure here is a bug, said as one
        load_config_text(text, args.out or "<generated>")
    except ConfigError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        print("topogang generate: internal error: the generated config does not load", file=sys.stderr)
        return 1
    for note in result.notes:
        print(f"topogang generate: note: {note}", file=sys.stderr)
    return _write(text, args.out, "topogang generate")


def cli_diff(argv: Sequence[str] | None = None) -> int:
    """`topogang diff OLD NEW [--json]` or `topogang diff --against URL NEW [--json]`: 0 when the
    configs describe the same cluster and quotas (and no running gang loses anything), 1 when they
    differ, 2 when either cannot be read or is invalid, or the extender cannot be asked (as diff(1))."""
    parser = argparse.ArgumentParser(
        prog="topogang diff",
        description="What changing config OLD into NEW changes: GPUs, nodes, cells, VC quotas, namespaces; "
        "with --against, NEW against the running extender, and which running gangs lose what.",
    )
    parser.add_argument("files", nargs="+", metavar="OLD NEW | NEW")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument(
        "--against",
        metavar="URL",
        help="the running extender's reads (e.g. http://127.0.0.1:9097, its admin listener through "
        "kubectl port-forward): its config and running gangs replace OLD",
    )
    parser.add_argument("--token-file", metavar="FILE", help="a bearer token for the admin routes")
    parser.add_argument("--cacert", metavar="FILE", help="CA bundle for an https URL")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if len(args.files) != (1 if args.against else 2):
        print("topogang diff: give OLD NEW, or --against URL NEW", file=sys.stderr)
        return 2
    if args.against:
        return _diff_against(args)
    loaded = []
    for file in args.files:
        try:
            loaded.append(load_config(file))
        except ConfigError as exc:
            for line in exc.lines():
                print(line, file=sys.stderr)
    if len(loaded) != 2:
        print("topogang diff: compares two valid configs; fix the errors above first", file=sys.stderr)
        return 2
    d = config_diff(loaded[0], loaded[1])
    print(json.dumps(d, indent=2) if args.json else format_diff(d))
    return 1 if d["changed"] else 0


def _diff_against(args: argparse.Namespace) -> int:
    try:
        new = load_config(args.files[0])
    except ConfigError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return 2
    try:
        token = Path(args.token_file).read_text(encoding="utf-8").strip() if args.token_file else None
        status = admin_get(args.against, "/v1/config", token, args.cacert)
        groups = admin_get(args.against, "/v1/inspect/affinitygroups", token, args.cacert)
    except (OSError, ValueError) as exc:
        print(f"topogang diff: cannot read the running extender at {args.against}: {exc}", file=sys.stderr)
        return 2
    source = f"{args.against} ({status.get('file', 'config')})"
    try:
        running = load_config_text(str(status.get("config") or ""), source)
    except ConfigError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return 2
    items = groups.get("items") if isinstance(groups, dict) else None
    d = diff_against(running, items if isinstance(items, list) else [], new, source)
    if args.json:
        print(json.dumps(d, indent=2))
    else:
        print(format_diff(d))
        print("\n".join(format_running(d)))
    return 1 if d["changed"] else 0


def cli_schema(argv: Sequence[str] | None = None) -> int:
    """`topogang schema [--out FILE|-] [--check]`: write (or check) the config's JSON Schema."""
    parser = argparse.ArgumentParser(
        prog="topogang schema",
        description="Write the JSON Schema of the config file, generated from the pydantic models.",
    )
    parser.add_argument("--out", metavar="FILE", default=str(SCHEMA_FILE), help="'-' for stdout")
    parser.add_argument("--check", action="store_true", help="exit 1 if FILE differs from the models")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    text = schema_text()
    if args.check:
        try:
            current = Path(args.out).read_text(encoding="utf-8")
        except OSError as exc:
            print(format_line(args.out, "", f"cannot read: {exc.strerror or exc}"), file=sys.stderr)
            return 1
        if current != text:
            print(
                format_line(args.out, "", "out of date; run `topogang schema` to regenerate"), file=sys.stderr
            )
            return 1
        return 0
    return _write(text, args.out, "topogang schema")


def schema_text() -> str:
    """The schema file's exact content (stable key order, trailing newline)."""
    return json.dumps(json_schema(), indent=2) + "\n"


def _write(text: str, out: str | None, prog: str) -> int:
    if out is None or out == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"{prog}: error: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


COMMANDS = {"validate": cli_validate, "generate": cli_generate, "schema": cli_schema, "diff": cli_diff}


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m config COMMAND ...` (the `topogang` console script has the same sub-commands)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print(f"usage: python -m config {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    return COMMANDS[args[0]](args[1:])
