# shellcheck shell=bash
# Pinned versions of the e2e control plane and where its binaries live. Sourced by build-bins.sh,
# cluster-up.sh and cluster-down.sh; tests/e2e/conftest.py runs those scripts and never duplicates this.
#
# Changed vs recipe (which picks v1.35.7; see scripts/e2e/README.md): the Go module proxy reachable from
# the dev/CI machines is a filtered mirror. Its k8s.io/kubernetes list holds v1.34.x, v1.35.4, v1.36.1,
# v1.36.3, v1.37.2 (`go list -m -versions k8s.io/kubernetes`; it answers 403 "This module version is not
# available" for others, e.g. v1.35.7). Before changing a version here, ask the proxy for that exact
# version (`go mod download -json MODULE@VERSION`): its lists are incomplete in both directions
# (FrameworkController has no list at all, see below).
#
# Kubernetes v1.37.2: the newest served (`go mod download -json k8s.io/kubernetes@v1.37.2` answers; go.mod
# says `go 1.26.0`, `godebug default=go1.26`, so the machines' Go 1.26.8 builds it: no GOTOOLCHAIN needed).
# Its Workload/PodGroup API is beta (scheduling.k8s.io/v1beta1), see E2E_APISERVER_FLAGS below.
# v1.35.4 (the previous pin) still builds with K8S_VERSION=v1.35.4 ETCD_VERSION=v3.6.5; its cache dir
# is kept (benchmarks use it).
K8S_VERSION=${K8S_VERSION:-v1.37.2}
# etcd: the version k8s.io/kubernetes@v1.37.2 pins (go.etcd.io/etcd/server/v3 v3.7.0; v1.35.4 pinned
# v3.6.5); build-bins.sh warns if the pin in the downloaded go.mod differs. Newer v3.7.x are served but
# not what 1.37.2 is tested with.
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
# kwok v0.8.0 stays: it is only a client of the API server (nodes, leases, pod status), built against
# client-go v0.36; nothing it uses changed in 1.37, and the e2e suite passes with it.
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
# FrameworkController: last tag; HEAD (d6e7078, 2023-04) only adds docs/slides on top of it. The proxy serves
# this exact version although `go list -m -versions github.com/microsoft/frameworkcontroller` fails (403).
FC_VERSION=${FC_VERSION:-v1.0.1}
# Helm: renders the chart deploy/helm/topogang (the e2e installs through it; deploy/*.yaml are rendered from it).
# Helm 4 (the current major); the chart is apiVersion v2, so Helm 3.x installs it as well.
HELM_VERSION=${HELM_VERSION:-v4.3.1}
# Kueue: the peer of `make bench-peers`; the newest version the module proxy serves (see build-bins.sh).
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}

# FrameworkController stays at v1.0.1 whatever the Kubernetes version: there is no newer release, and its
# e2e test passes against 1.37.2 as it did against 1.35.4.
#
# kube-scheduler config (kubescheduler.config.k8s.io/v1): no field deploy/kube-scheduler-config.yaml uses
# changed. 1.37 adds the plugin sets placementGenerate, placementScore and podGroupPostFilter; the deployed
# file does not name them, because kube-scheduler decodes its config strictly and an older one would refuse
# the file. It disables plugins by name under multiPoint instead, which every version accepts (1.35.4
# checked with --write-config-to).

# Feature gates and API versions for the Kubernetes' own gangs (Workload/PodGroup API, KEP-4671/5732):
# - 1.37: the GangScheduling gate of 1.35/1.36 is gone (folded into GenericWorkload, beta but off by
#   default); GenericWorkload turns on the PodGroup API, `spec.schedulingGroup` on pods and
#   kube-scheduler's PodGroup cycle (its GangScheduling plugin joins the default profile).
#   TopologyAwareWorkloadScheduling (alpha) allows `schedulingConstraints.topology` on a PodGroup and adds
#   the TopologyPlacementGenerator and PodGroupPodsCount plugins. The v1beta1 API group version, like
#   every beta API since 1.24, is off unless --runtime-config turns it on.
# - 1.35 (the previous pin) keeps its flags as they were (none), so its binaries run as before.
case $K8S_VERSION in
v1.37.*)
	E2E_FEATURE_GATES=GenericWorkload=true,TopologyAwareWorkloadScheduling=true
	E2E_APISERVER_FLAGS=(--feature-gates="$E2E_FEATURE_GATES" --runtime-config=scheduling.k8s.io/v1beta1=true)
	E2E_SCHEDULER_FLAGS=(--feature-gates="$E2E_FEATURE_GATES")
	;;
*)
	E2E_FEATURE_GATES=""
	E2E_APISERVER_FLAGS=()
	E2E_SCHEDULER_FLAGS=()
	;;
esac
# shellcheck disable=SC2034 # used by the scripts that source this file
E2E_NATIVE_GANGS=$([ -n "$E2E_FEATURE_GATES" ] && echo 1 || echo 0)

E2E_VERSIONS="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_fc-${FC_VERSION}"
E2E_HOME=${TOPOGANG_E2E_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/topogang-e2e/$E2E_VERSIONS}
E2E_BIN=${TOPOGANG_E2E_BIN:-$E2E_HOME/bin}
# Go lives at /usr/local/go on the dev/CI machines but is not always on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	PATH=$PATH:/usr/local/go/bin
fi
