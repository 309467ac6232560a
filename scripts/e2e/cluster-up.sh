#!/usr/bin/env bash
# Bring up a throw-away control plane on 127.0.0.1: etcd -> kube-apiserver -> kwok (fake GPU nodes, pods become
# Running with pod IPs) -> kube-scheduler (the project's scheduler config, extender URL templated in).
# Recipe §3, §4, §5, §6.2 (see scripts/e2e/README.md); deviations are marked "Changed vs recipe".
#
# usage: scripts/e2e/cluster-up.sh WORKDIR [EXTENDER_URL]
#   EXTENDER_URL: the extender's urlPrefix, e.g. http://127.0.0.1:18080/v1/extender. Without it a free port is
#   reserved and written to WORKDIR/env as EXTENDER_URL/EXTENDER_PORT, so the extender can be started there later
#   (until then the scheduler just retries the pods that need it).
#
# env: TOPOGANG_E2E_TOPOLOGY (topology config for the fake nodes; default config/examples/example-cluster.yaml),
#      TOPOGANG_E2E_SCHEDULER_CONFIG (default deploy/kube-scheduler-config.yaml; if that file does not exist,
#      scheduler_config.py's clearly marked FALLBACK is used),
#      TOPOGANG_E2E_KWOK_STAGES (extra KWOK stage files, ':'-separated, appended to the stock ones),
#      TOPOGANG_PYTHON (default .venv/bin/python), TOPOGANG_E2E_OWNER_PID (if set, a watchdog tears the cluster
#      down when that process exits, e.g. a pytest that was killed), TOPOGANG_E2E_HOME/_BIN (see versions.sh).
#
# Writes: WORKDIR/env (shell/KEY=VALUE: KUBECONFIG, API_URL, ports, ...), WORKDIR/admin.kubeconfig, pki/,
# logs/<component>.log, run/<component>.pid ("PID STARTTIME"), nodes.json, scheduler.yaml, kwok.yaml.
# On any failure it tears down what it started (scripts/e2e/cluster-down.sh) and exits 1; logs stay.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

W=$(realpath -m "${1:?usage: cluster-up.sh WORKDIR [EXTENDER_URL]}")
EXTENDER_URL=${2:-}
TOPOLOGY=${TOPOGANG_E2E_TOPOLOGY:-$REPO/config/examples/example-cluster.yaml}
SCHED_CONFIG=${TOPOGANG_E2E_SCHEDULER_CONFIG:-$REPO/deploy/kube-scheduler-config.yaml}
PY=${TOPOGANG_PYTHON:-$REPO/.venv/bin/python}
[ -x "$PY" ] || PY=python3

T0=$(date +%s%N)
elapsed() { # seconds since start, one decimal
	local ms=$((($(date +%s%N) - T0) / 1000000))
	printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}
log() { printf '[%s +%5ss] cluster-up: %s\n' "$(date +%H:%M:%S)" "$(elapsed)" "$*" >&2; }

for b in etcd kube-apiserver kube-scheduler kwok; do
	[ -x "$E2E_BIN/$b" ] || {
		log "missing $E2E_BIN/$b: run scripts/e2e/build-bins.sh first"
		exit 2
	}
done
[ -f "$E2E_HOME/kwok-stages/pod-ready.yaml" ] || {
	log "missing kwok stages in $E2E_HOME/kwok-stages: run scripts/e2e/build-bins.sh kwok"
	exit 2
}
command -v openssl >/dev/null || {
	log "openssl not found"
	exit 2
}

if [ -d "$W/run" ] && compgen -G "$W/run/*.pid" >/dev/null; then
	log "$W/run holds pid files: a cluster may still be up there; run cluster-down.sh $W first"
	exit 2
fi
mkdir -p "$W"/{pki,etcd,logs,run}
chmod 700 "$W"

# Any failure (errexit anywhere, a signal) before the end: show the logs' tails and tear down what was started.
UP_OK=0
on_exit() {
	local rc=$?
	[ "$UP_OK" = 1 ] && return 0
	log "FAILED (rc=$rc); last log lines:"
	for f in "$W"/logs/*.log; do
		[ -f "$f" ] || continue
		echo "----- $f" >&2
		tail -n 15 "$f" >&2
	done
	"$HERE/cluster-down.sh" "$W" >&2 || true
	exit 1
}
trap on_exit EXIT
trap 'exit 130' INT TERM HUP

# --- ports: all at once, so they are distinct; then freed for the daemons (tiny race, acceptable for tests)
read -r ETCD_PORT ETCD_PEER_PORT API_PORT SCHED_PORT KWOK_PORT EXT_PORT < <("$PY" -c '
import socket
ss = [socket.socket() for _ in range(6)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
')
if [ -z "$EXTENDER_URL" ]; then
	EXTENDER_URL="http://127.0.0.1:$EXT_PORT/v1/extender"
else
	EXT_PORT=$(sed -E 's#^[a-z]+://[^:/]+:([0-9]+).*#\1#;t;s#.*##' <<<"$EXTENDER_URL")
fi

# start, wait_for: shared with scheduler-up.sh
# shellcheck source=lib.sh
. "$HERE/lib.sh"

# --- watchdog: tear down if the owner (pytest) dies without calling cluster-down.sh
if [ -n "${TOPOGANG_E2E_OWNER_PID:-}" ]; then
	start watchdog bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" "$3"' \
		watchdog "$TOPOGANG_E2E_OWNER_PID" "$HERE/cluster-down.sh" "$W"
fi

# --- 1. PKI (recipe §4.1): own CA, apiserver serving cert, admin client cert (system:masters), SA key pair
P="$W/pki"
cat >"$P/ca.cnf" <<'EOF'
[req]
distinguished_name = dn
x509_extensions = v3_ca
prompt = no
[dn]
CN = topogang-e2e-ca
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
EOF
cat >"$P/server.ext" <<'EOF'
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
authorityKeyIdentifier = keyid,issuer
subjectKeyIdentifier = hash
EOF
cat >"$P/client.ext" <<'EOF'
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid,issuer
subjectKeyIdentifier = hash
EOF
(
	cd "$P"
	exec >"$W/logs/pki.log" 2>&1
	openssl genrsa -out ca.key 2048
	openssl req -x509 -new -key ca.key -days 3650 -sha256 -config ca.cnf -out ca.crt
	openssl genrsa -out apiserver.key 2048
	openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" -out apiserver.csr
	openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
		-extfile server.ext -out apiserver.crt
	openssl genrsa -out admin.key 2048
	openssl req -new -key admin.key -subj "/O=system:masters/CN=e2e-admin" -out admin.csr
	openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
		-extfile client.ext -out admin.crt
	openssl genrsa -out sa.key 2048
	openssl rsa -in sa.key -pubout -out sa.pub
)
log "PKI ready ($P)"

# --- 2. etcd (recipe §3). --unsafe-no-fsync: throw-away data, 3.5+ only (we build 3.6).
start etcd "$E2E_BIN/etcd" --name e2e --data-dir "$W/etcd" \
	--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
	--quota-backend-bytes=2147483648 --auto-compaction-retention=1 \
	--logger=zap --log-level=warn --unsafe-no-fsync
wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

# --- 3. kube-apiserver (recipe §4.2)
# Changed vs recipe: --requestheader-* added. Without them kube-apiserver publishes no requestheader CA in
# kube-system/extension-apiserver-authentication and kube-scheduler's delegated authentication logs
# "missing content for CA bundle ...requestheader-client-ca-file" every few seconds. Only a client cert with
# CN=front-proxy-client (none is issued) could act as a front proxy.
start kube-apiserver "$E2E_BIN/kube-apiserver" \
	--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
	--bind-address=127.0.0.1 --secure-port="$API_PORT" \
	--advertise-address=127.0.0.1 \
	--endpoint-reconciler-type=none \
	--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
	--client-ca-file="$P/ca.crt" \
	--requestheader-client-ca-file="$P/ca.crt" --requestheader-allowed-names=front-proxy-client \
	--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
	--requestheader-extra-headers-prefix=X-Remote-Extra- \
	--authorization-mode=RBAC \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$P/sa.pub" \
	--service-account-signing-key-file="$P/sa.key" \
	--service-cluster-ip-range=10.96.0.0/16 \
	--disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
	--allow-privileged=true \
	--cert-dir="$W/apiserver-certs" \
	--profiling=false "${E2E_APISERVER_FLAGS[@]}"
CURL_ADMIN=(curl -sf --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key")
wait_for kube-apiserver 180 "${CURL_ADMIN[@]}" "https://127.0.0.1:$API_PORT/readyz"

# --- 4. kubeconfig (recipe §4.3); absolute paths, never ~/.kube/config
cat >"$W/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $P/ca.crt
users:
- name: e2e-admin
  user:
    client-certificate: $P/admin.crt
    client-key: $P/admin.key
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e-admin}
current-context: e2e
EOF

# --- 5. kwok (recipe §2.2/2.3). Stages from the kwok module (v0.8.0 has no built-in ones).
# Changed vs recipe: --server-address on a free loopback port, only to get kwok's /healthz for the readiness wait;
# fallback pod CIDR 10.200.0.0/16 and node IP 10.31.0.1, disjoint from the node/pod ranges of fake_nodes.py.
# Changed vs recipe: --disregard-status-with-annotation-selector. KWOK rewrites Ready=True within milliseconds on
# every node it manages, so a test could never show a NotReady node. A node annotated kwok.x-k8s.io/status=custom
# keeps whatever status the test patches (its pods and lease are still KWOK's); removing the annotation hands the
# status back to KWOK, whose node-initialize stage sets Ready=True again.
{
	cat <<'EOF'
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: 10.200.0.0/16
  nodeIP: 10.31.0.1
  manageAllNodes: true
  nodeLeaseDurationSeconds: 40
  # Changed vs recipe: kwok v0.8.0 does not apply its own defaults to a KwokConfiguration read from --config
  # ("failed to create node leases controller: node leases parallelism must be greater than 0"), so the
  # defaults from its zz_generated.defaults.go are spelled out here.
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: true
  enableContentionProfiling: false
  enableProfilingHandler: false
EOF
	# TOPOGANG_E2E_KWOK_STAGES: extra stage files (':'-separated), e.g. make bench-peers' timed pod completion
	for f in "$E2E_HOME"/kwok-stages/*.yaml ${TOPOGANG_E2E_KWOK_STAGES:+${TOPOGANG_E2E_KWOK_STAGES//:/ }}; do
		echo "---"
		cat "$f"
	done
} >"$W/kwok.yaml"
# HOME/KWOK_WORKDIR=$W: kwok first loads <workdir>/kwok.yaml, so a developer's ~/.kwok cannot leak in.
start kwok env HOME="$W" KWOK_WORKDIR="$W" "$E2E_BIN/kwok" \
	--kubeconfig="$W/admin.kubeconfig" --config="$W/kwok.yaml" \
	--manage-all-nodes=true --cidr=10.200.0.0/16 --node-ip=10.31.0.1 --node-lease-duration-seconds=40 \
	--server-address="127.0.0.1:$KWOK_PORT" \
	--disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom
wait_for kwok 30 curl -sf "http://127.0.0.1:$KWOK_PORT/healthz"

# --- 6. fake GPU nodes from the topology config; waits until kwok has made every one Ready
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$HERE/fake_nodes.py" --config "$TOPOLOGY" \
	--kubeconfig "$W/admin.kubeconfig" --out "$W/nodes.json" --wait 60 2>>"$W/logs/fake_nodes.log"
log "$("$PY" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["nodes"]))' "$W/nodes.json") fake GPU nodes Ready (from $TOPOLOGY)"

# --- 7. kube-scheduler (recipe §5) with the project's config, urlPrefix/kubeconfig templated; with
# TOPOGANG_E2E_SCHEDULER_LATER=1 not now: scheduler-up.sh starts it (after what it needs is installed, e.g.
# the client certificate of the chart's mutual TLS)
if [ "${TOPOGANG_E2E_SCHEDULER_LATER:-}" != 1 ]; then
	scheduler_up "$EXTENDER_URL" "${TOPOGANG_E2E_SCHEDULER_TLS:-}"
fi

cat >"$W/env" <<EOF
KUBECONFIG=$W/admin.kubeconfig
API_URL=https://127.0.0.1:$API_PORT
API_PORT=$API_PORT
ETCD_PORT=$ETCD_PORT
SCHED_PORT=$SCHED_PORT
KWOK_PORT=$KWOK_PORT
EXTENDER_URL=$EXTENDER_URL
EXTENDER_PORT=$EXT_PORT
CA_CERT=$P/ca.crt
CLIENT_CERT=$P/admin.crt
CLIENT_KEY=$P/admin.key
E2E_BIN=$E2E_BIN
K8S_VERSION=$K8S_VERSION
FEATURE_GATES=$E2E_FEATURE_GATES
NATIVE_GANGS=$E2E_NATIVE_GANGS
TOPOLOGY=$TOPOLOGY
EOF
UP_OK=1
log "cluster up in $(elapsed)s: API https://127.0.0.1:$API_PORT, kubeconfig $W/admin.kubeconfig, extender URL $EXTENDER_URL"
