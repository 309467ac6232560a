"""Write the e2e kube-scheduler config: the project's deploy/ KubeSchedulerConfiguration, templated.

    python scripts/e2e/scheduler_config.py --kubeconfig W/admin.kubeconfig \
        --extender-url http://127.0.0.1:PORT/v1/extender --out W/scheduler.yaml [--deploy deploy/...yaml]

What is changed for the e2e cluster (the rest, profiles and extender verbs included, is kept as deployed):
- clientConnection.kubeconfig -> the e2e admin kubeconfig (the --kubeconfig flag is ignored with --config);
- leaderElection.leaderElect -> false (one scheduler, no Lease namespace to prepare);
- every extenders[].urlPrefix -> --extender-url; with an http:// URL, tlsConfig/enableHTTPS are dropped (the
  deployed file may name certificate files that only exist in the real Deployment); with --tls-dir, the
  tlsConfig's certFile/keyFile/caFile are the files of the same names in that directory (where the test
  wrote what the Deployment would mount), serverName kept.

deploy/kube-scheduler-config.yaml may be a bare KubeSchedulerConfiguration, a multi-document file, or a
ConfigMap holding it under `data`; the first KubeSchedulerConfiguration found is used. If the file does not
exist yet (another engineer is writing it), FALLBACK_CONFIG below is used instead and the output says so.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY_CONFIG = REPO / "deploy" / "kube-scheduler-config.yaml"

# ---- FALLBACK: used only while deploy/kube-scheduler-config.yaml does not exist ---------------------------
# Equivalent of deploy/kube-scheduler-config.yaml (kube-scheduler's `extenders` field, see Kubernetes'
# "kube-scheduler Configuration (v1)" reference, type Extender): a second
# scheduler `topogang-scheduler` whose only extender is topogang (filter/prioritize/preempt/bind under
# /v1/extender), nodeCacheCapable, not ignorable, managing the virtual opt-in resources (topogang's and
# HiveD's) that the stock NodeResourcesFit must ignore. Delete this block once deploy/ has the real file.
FALLBACK_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ""
  qps: 100
  burst: 200
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceNamespace: topogang-system
  resourceName: topogang-scheduler
percentageOfNodesToScore: 100
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 10
profiles:
- schedulerName: topogang-scheduler
extenders:
- urlPrefix: "http://topogang-extender.topogang-system.svc.cluster.local:9096/v1/extender"
  filterVerb: filter
  prioritizeVerb: prioritize
  preemptVerb: preempt
  bindVerb: bind
  weight: 10
  enableHTTPS: false
  httpTimeout: 10s
  nodeCacheCapable: true
  ignorable: false
  managedResources:
  - name: topogang.io/pod-scheduling-enable
    ignoredByScheduler: true
  - name: hivedscheduler.microsoft.com/pod-scheduling-enable
    ignoredByScheduler: true
"""
# ---- end FALLBACK -----------------------------------------------------------------------------------------

KIND = "KubeSchedulerConfiguration"


def find_scheduler_config(text: str) -> dict[str, Any] | None:
    """The first KubeSchedulerConfiguration in a (multi-document) YAML text, also inside ConfigMaps."""
    for doc in yaml.safe_load_all(text):
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == KIND:
            return doc
        if doc.get("kind") == "ConfigMap":
            for value in (doc.get("data") or {}).values():
                inner = find_scheduler_config(str(value))
                if inner is not None:
                    return inner
    return None


def e2e_config(
    base: dict[str, Any], kubeconfig: str, extender_url: str, tls_dir: str | None = None
) -> dict[str, Any]:
    cfg = copy.deepcopy(base)
    cfg.setdefault("clientConnection", {})["kubeconfig"] = kubeconfig
    cfg["leaderElection"] = {"leaderElect": False}
    for ext in cfg.get("extenders") or []:
        ext["urlPrefix"] = extender_url
        if extender_url.startswith("http://"):
            ext.pop("tlsConfig", None)
            ext["enableHTTPS"] = False
        elif tls_dir is not None:
            tls = ext.get("tlsConfig") or {}
            for key in ("certFile", "keyFile", "caFile"):
                if key in tls:
                    tls[key] = str(Path(tls_dir) / Path(str(tls[key])).name)
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write the e2e kube-scheduler config")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--extender-url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--deploy", default=str(DEPLOY_CONFIG), help="the project's scheduler config")
    ap.add_argument("--tls-dir", default=None, help="where the tlsConfig's files are (https URLs)")
    args = ap.parse_args(argv)
    deploy = Path(args.deploy)
    if deploy.is_file():
        base = find_scheduler_config(deploy.read_text(encoding="utf-8"))
        if base is None:
            print(f"scheduler_config: no {KIND} in {deploy}", file=sys.stderr)
            return 1
        source = str(deploy)
    else:
        base = find_scheduler_config(FALLBACK_CONFIG)
        assert base is not None
        source = f"FALLBACK in {Path(__file__).name} ({deploy} does not exist yet)"
    cfg = e2e_config(base, args.kubeconfig, args.extender_url, args.tls_dir)
    header = f"# Generated by scripts/e2e/scheduler_config.py from {source}\n"
    Path(args.out).write_text(header + yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    print(f"scheduler config from {source}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
