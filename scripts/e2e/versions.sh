# shellcheck shell=bash
# Pinned versions of the e2e control plane and where its binaries live. Sourced by build-bins.sh,
# cluster-up.sh and cluster-down.sh; tests/e2e/conftest.py runs those scripts and never duplicates this.
#
# Changed vs recipe (which picks v1.35.7; see scripts/e2e/README.md): the Go module proxy reachable from
# the dev/CI machines is a filtered mirror. It answers 403 "This module version is not available" for
# k8s.io/kubernetes@v1.35.7 (@v/v1.35.7.info); its list holds v1.34.4, v1.35.4, v1.36.1, v1.36.3, v1.37.2
# (`go list -m -versions k8s.io/kubernetes`). v1.35.4 keeps the recipe's minor (go 1.25.0, godebug default=go1.25,
# etcd pinned at v3.6.5, same staging-module list incl. externaljwt), so only the patch level moved.
# Before changing a version here, ask the proxy for that exact version (`go mod download -json MODULE@VERSION`):
# its version lists are incomplete in both directions (FrameworkController has no list at all, see below).
K8S_VERSION=${K8S_VERSION:-v1.35.4}
# etcd: the version k8s.io/kubernetes@v1.35.4 pins (go.etcd.io/etcd/server/v3 v3.6.5); build-bins.sh warns if
# the pin in the downloaded go.mod differs.
ETCD_VERSION=${ETCD_VERSION:-v3.6.5}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
# FrameworkController: last tag; HEAD (d6e7078, 2023-04) only adds docs/slides on top of it. The proxy serves
# this exact version although `go list -m -versions github.com/microsoft/frameworkcontroller` fails (403).
FC_VERSION=${FC_VERSION:-v1.0.1}
# Helm: renders the chart deploy/helm/topogang (the e2e installs through it; deploy/*.yaml are rendered from it).
# Helm 4 (the current major); the chart is apiVersion v2, so Helm 3.x installs it as well.
HELM_VERSION=${HELM_VERSION:-v4.3.1}

E2E_VERSIONS="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_fc-${FC_VERSION}"
E2E_HOME=${TOPOGANG_E2E_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/topogang-e2e/$E2E_VERSIONS}
E2E_BIN=${TOPOGANG_E2E_BIN:-$E2E_HOME/bin}
# Go lives at /usr/local/go on the dev/CI machines but is not always on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	PATH=$PATH:/usr/local/go/bin
fi
