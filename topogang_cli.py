"""The `topogang` command: one entry point, one sub-command per job.

Sub-commands import their module lazily so `topogang validate` does not pay for the HTTP stack.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

USAGE = """usage: topogang COMMAND [ARGS]

commands:
  validate FILE...   check a topology/quota config; print its summary or every error
  diff OLD NEW       what an edit changes: GPUs, nodes, cells, VC quotas (--json for data)
  generate           write a generated cluster config (e.g. 1,000 nodes x 8 GPUs for benchmarks)
  schema             write the config's JSON Schema (for editors)
  demo [FILE]        place a scripted job mix on a cluster and print every decision
  serve              run the extender (standalone on a config file, or against Kubernetes)
  replay             drive a running extender like kube-scheduler does and print its decisions
  simulate           replay a GPU-cluster trace through several policies and write a report
  barrier            FrameworkBarrier drop-in: wait until the gang is Ready, write injector.sh
  version            print the installed version (also: topogang --version)
"""


def version() -> str:
    """The installed distribution's version, from its package metadata (one source: pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("topogang")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _version(argv: Sequence[str]) -> int:
    if argv:
        print(f"topogang version: unexpected arguments {' '.join(argv)!r}", file=sys.stderr)
        return 2
    print(f"topogang {version()}")
    return 0


def _validate(argv: Sequence[str]) -> int:
    from config.cli import cli_validate

    return cli_validate(argv)


def _diff(argv: Sequence[str]) -> int:
    from config.cli import cli_diff

    return cli_diff(argv)


def _generate(argv: Sequence[str]) -> int:
    from config.cli import cli_generate

    return cli_generate(argv)


def _schema(argv: Sequence[str]) -> int:
    from config.cli import cli_schema

    return cli_schema(argv)


def _demo(argv: Sequence[str]) -> int:
    from extender.demo import main as demo_main

    return demo_main(argv)


def _serve(argv: Sequence[str]) -> int:
    from extender.cli import serve_main

    return serve_main(argv)


def _replay(argv: Sequence[str]) -> int:
    from extender.replay import main as replay_main

    return replay_main(argv)


def _simulate(argv: Sequence[str]) -> int:
    from loadtest.simulate.cli import main as simulate_main

    return simulate_main(argv)


def _barrier(argv: Sequence[str]) -> int:
    from extender.gangs.barrier import main as barrier_main

    return barrier_main(argv)


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "validate": _validate,
    "diff": _diff,
    "generate": _generate,
    "schema": _schema,
    "demo": _demo,
    "serve": _serve,
    "replay": _replay,
    "simulate": _simulate,
    "barrier": _barrier,
    "version": _version,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        return _version(args[1:])
    cmd = COMMANDS.get(args[0])
    if cmd is None:
        print(f"topogang: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return cmd(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
