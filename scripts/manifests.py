"""deploy/*.yaml rendered from the Helm chart deploy/helm/topogang, the one source of the install.

    python scripts/manifests.py            write deploy/*.yaml (`make manifests`)
    python scripts/manifests.py --check    exit 1 naming every file that differs from the chart

The raw manifests are `helm template` of the chart with its defaults, except that the cluster config comes
from a ConfigMap the admin creates (`existingConfigMap: topogang-config`, key config.yaml), so the files
hold no cluster, and so do the verbs' mutual-TLS Secrets (`extender.verbs.mtls.certificates=secrets`,
the two kubernetes.io/tls Secrets of docs/security.md), so they hold no key. Each file gathers the
documents of some chart files (FILES below); deploy/kube-scheduler-config.yaml is the
KubeSchedulerConfiguration inside the scheduler's ConfigMap, as a file of its own
(scripts/e2e/scheduler_config.py reads it).

helm comes from $TOPOGANG_HELM or the e2e bin dir (`bash scripts/e2e/build-bins.sh helm` builds it from Go
modules).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "topogang"
DEPLOY = REPO / "deploy"
RELEASE = "topogang"
# no generated certificates in files meant for git: the verbs' two Secrets and the read listener's are
# made by the admin
RAW_VALUES = (
    "--set",
    "existingConfigMap=topogang-config",
    "--set",
    "extender.verbs.mtls.certificates=secrets",
    "--set",
    "extender.tls.secretName=topogang-read-tls",
    "--set",
    "extender.admissionGate.enabled=true",  # its own file, applied only by who wants it
)
SCHEDULER_CONFIG_KEY = "kube-scheduler-config.yaml"
# deploy file <- the chart files whose documents it holds, in helm's install order
FILES = {
    "rbac.yaml": ("templates/namespace.yaml", "templates/rbac.yaml"),
    "gangreservation-crd.yaml": ("crds/gangreservation-crd.yaml",),
    "extender.yaml": ("templates/extender.yaml", "templates/networkpolicy.yaml"),
    "scheduler.yaml": ("templates/scheduler-config.yaml", "templates/scheduler.yaml"),
    "admission-gate.yaml": ("templates/admission-gate.yaml",),
}
HEADER = (
    "# Rendered from the Helm chart deploy/helm/topogang by `make manifests` (scripts/manifests.py);\n"
    "# change the chart, not this file. tests/deploy/test_chart.py checks that the two agree.\n"
)


class HelmError(RuntimeError):
    """helm is missing or refused the chart; the message says which and why."""


def helm_binary() -> Path | None:
    """$TOPOGANG_HELM, else the helm that scripts/e2e/build-bins.sh built; None if neither exists."""
    path = Path(os.environ.get("TOPOGANG_HELM") or bin_dir() / "helm")
    return path if os.access(path, os.X_OK) else None


def bin_dir() -> Path:
    """Where scripts/e2e/build-bins.sh puts what it builds (scripts/e2e/versions.sh decides)."""
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "e2e" / "build-bins.sh"), "--print-bin-dir"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def helm(binary: Path, *args: str) -> str:
    """helm's stdout; a failure raises HelmError with its stderr."""
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} failed (rc={done.returncode}):\n{done.stderr.strip()}")
    return done.stdout


def template(binary: Path, *values: str, release: str = RELEASE) -> str:
    """`helm template` of the chart, CRDs included."""
    return helm(binary, "template", release, str(CHART), "--include-crds", *values)


def by_source(rendered: str) -> dict[str, list[str]]:
    """The rendered documents per chart file (`# Source: topogang/templates/x.yaml`), in output order."""
    out: dict[str, list[str]] = {}
    for doc in rendered.split("\n---\n"):
        lines = doc.strip("\n").removeprefix("---\n").splitlines()
        if not lines or not lines[0].startswith("# Source: "):
            continue
        source = lines[0].removeprefix("# Source: ").split("/", 1)[1]
        out.setdefault(source, []).append("\n".join(lines[1:]).strip("\n") + "\n")
    return out


def scheduler_config(docs: list[str]) -> str:
    """The KubeSchedulerConfiguration held by the scheduler's ConfigMap."""
    for doc in docs:
        obj = yaml.safe_load(doc)
        if obj.get("kind") == "ConfigMap" and SCHEDULER_CONFIG_KEY in obj.get("data", {}):
            return str(obj["data"][SCHEDULER_CONFIG_KEY])
    raise HelmError(f"the chart rendered no ConfigMap with {SCHEDULER_CONFIG_KEY}")


def manifests(binary: Path) -> dict[str, str]:
    """deploy/ file name -> its text, rendered from the chart."""
    sources = by_source(template(binary, *RAW_VALUES))
    files = {}
    for name, parts in FILES.items():
        docs = [d for part in parts for d in sources.get(part, [])]
        if not docs:
            raise HelmError(f"the chart rendered nothing from {', '.join(parts)} for deploy/{name}")
        files[name] = HEADER + "---\n".join(docs)
    files[SCHEDULER_CONFIG_KEY] = HEADER + scheduler_config(sources["templates/scheduler-config.yaml"])
    return files


def differences(binary: Path) -> list[str]:
    """deploy/ files that are not what the chart renders (missing ones included)."""
    want = manifests(binary)
    return [n for n, text in want.items() if not (DEPLOY / n).is_file() or (DEPLOY / n).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="render deploy/*.yaml from the Helm chart")
    ap.add_argument("--check", action="store_true", help="only report files that differ from the chart")
    args = ap.parse_args(argv)
    binary = helm_binary()
    if binary is None:
        print("manifests: no helm; build it with `bash scripts/e2e/build-bins.sh helm`", file=sys.stderr)
        return 2
    if args.check:
        stale = differences(binary)
        for name in stale:
            print(f"deploy/{name} differs from the chart: run `make manifests`", file=sys.stderr)
        return 1 if stale else 0
    for name, text in manifests(binary).items():
        (DEPLOY / name).write_text(text, encoding="utf-8")
        print(f"deploy/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
