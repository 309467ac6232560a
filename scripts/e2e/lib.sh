# Shell functions shared by cluster-up.sh and scheduler-up.sh (sourced; they need W, log and, for
# scheduler_up, HERE, PY, E2E_BIN, SCHED_PORT, SCHED_CONFIG and E2E_SCHEDULER_FLAGS from versions.sh).

# start NAME CMD...: own session and process group (setsid execs in place in a non-interactive shell, so $! is
# both the pid and the pgid); pid file holds "PID STARTTIME" so cluster-down.sh never signals a recycled pid.
start() {
	local n=$1
	shift
	setsid "$@" >"$W/logs/$n.log" 2>&1 </dev/null &
	local pid=$! stat
	stat=$(<"/proc/$pid/stat")
	stat=${stat##*) } # fields after "pid (comm) ": starttime (field 22) is the 20th
	read -r -a stat <<<"$stat"
	echo "$pid ${stat[19]}" >"$W/run/$n.pid"
	log "$n started (pid $pid)"
}
# wait_for NAME SECONDS CMD...: poll CMD; fail early if the component died.
wait_for() {
	local n=$1 t=$2 pid end
	shift 2
	pid=$(cut -d' ' -f1 "$W/run/$n.pid")
	end=$(($(date +%s) + t))
	until "$@" >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "$n exited early; see $W/logs/$n.log"
			return 1
		fi
		if [ "$(date +%s)" -ge "$end" ]; then
			log "$n not ready after ${t}s; see $W/logs/$n.log"
			return 1
		fi
		sleep 0.2
	done
	log "$n ready"
}

# scheduler_up EXTENDER_URL [TLS_DIR]: kube-scheduler on the project's config (urlPrefix, kubeconfig and, with
# TLS_DIR, the tlsConfig files templated in), ready.
scheduler_up() {
	local url=$1 tls=${2:-}
	"$PY" "$HERE/scheduler_config.py" --kubeconfig "$W/admin.kubeconfig" --extender-url "$url" \
		--deploy "$SCHED_CONFIG" --out "$W/scheduler.yaml" ${tls:+--tls-dir "$tls"} 2>>"$W/logs/scheduler_config.log"
	log "$(tail -n 1 "$W/logs/scheduler_config.log")"
	start kube-scheduler "$E2E_BIN/kube-scheduler" --config="$W/scheduler.yaml" \
		--bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
		--authentication-kubeconfig="$W/admin.kubeconfig" --authorization-kubeconfig="$W/admin.kubeconfig" \
		--v=2 "${E2E_SCHEDULER_FLAGS[@]}"
	wait_for kube-scheduler 60 curl -sfk "https://127.0.0.1:$SCHED_PORT/readyz"
}
