#!/usr/bin/env bash
# Start the kube-scheduler of a control plane that cluster-up.sh brought up with TOPOGANG_E2E_SCHEDULER_LATER=1,
# once what it needs exists (the e2e suite installs the Helm chart first and takes kube-scheduler's client
# certificate for the verbs' mutual TLS from the Secret the chart made).
#
# usage: scripts/e2e/scheduler-up.sh WORKDIR EXTENDER_URL [TLS_DIR]
#   EXTENDER_URL  the extender's urlPrefix (also written to WORKDIR/env as EXTENDER_URL)
#   TLS_DIR       a directory holding tls.crt, tls.key and ca.crt: the scheduler config's tlsConfig files
# env: TOPOGANG_E2E_SCHEDULER_CONFIG, TOPOGANG_PYTHON as for cluster-up.sh. cluster-down.sh stops it.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"
W=$(realpath -m "${1:?usage: scheduler-up.sh WORKDIR EXTENDER_URL [TLS_DIR]}")
URL=${2:?usage: scheduler-up.sh WORKDIR EXTENDER_URL [TLS_DIR]}
TLS=${3:-}
SCHED_CONFIG=${TOPOGANG_E2E_SCHEDULER_CONFIG:-$REPO/deploy/kube-scheduler-config.yaml}
PY=${TOPOGANG_PYTHON:-$REPO/.venv/bin/python}
[ -x "$PY" ] || PY=python3
log() { printf '[%s] scheduler-up: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# shellcheck source=lib.sh
. "$HERE/lib.sh"
[ -f "$W/env" ] || {
	log "no $W/env: run cluster-up.sh first"
	exit 2
}
SCHED_PORT=$(sed -n 's/^SCHED_PORT=//p' "$W/env")
[ ! -f "$W/run/kube-scheduler.pid" ] || {
	log "kube-scheduler already started ($W/run/kube-scheduler.pid)"
	exit 2
}
scheduler_up "$URL" "$TLS"
sed -i "s#^EXTENDER_URL=.*#EXTENDER_URL=$URL#" "$W/env"
