#!/usr/bin/env bash
# Stop a control plane started by cluster-up.sh: only the processes recorded in WORKDIR/run, each by its own
# process group (so anything it forked goes too), TERM then KILL after a grace period. Idempotent; safe to call
# after a failed or partial bring-up. Keeps WORKDIR/logs; removes the etcd data (set KEEP_E2E_DATA=1 to keep it).
#
# usage: scripts/e2e/cluster-down.sh WORKDIR
set -uo pipefail
W=$(realpath -m "${1:?usage: cluster-down.sh WORKDIR}")
GRACE=${TOPOGANG_E2E_STOP_GRACE:-10}
log() { printf '[%s] cluster-down: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
[ -d "$W/run" ] || exit 0

starttime() { # PID -> field 22 of /proc/PID/stat (robust to spaces in comm), empty if gone
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	s=${s##*) }
	read -r -a s <<<"$s"
	echo "${s[19]}"
}
# Is any non-zombie process left in process group $1? (`kill -0 -- -PGID` also counts zombies, and a daemon
# whose parent, cluster-up.sh, has exited is reaped by init only after a while.)
group_alive() {
	local pg=$1 f line
	for f in /proc/[0-9]*/stat; do
		read -r line <"$f" 2>/dev/null || continue
		line=${line##*) }
		read -r -a line <<<"$line" # [0]=state [1]=ppid [2]=pgrp
		[ "${line[2]}" = "$pg" ] && [ "${line[0]}" != Z ] && return 0
	done
	return 1
}

stop() { # NAME
	local n=$1 f="$W/run/$1.pid" pid st now i
	[ -f "$f" ] || return 0
	read -r pid st <"$f"
	if [ "$pid" = "$$" ]; then # the watchdog exec'd into this script
		rm -f "$f"
		return 0
	fi
	now=$(starttime "$pid")
	if [ -n "$now" ] && [ "$now" != "$st" ]; then
		log "$n: pid $pid belongs to another process now; not signalling it"
		rm -f "$f"
		return 0
	fi
	# Leader alive (same start time) or gone; in both cases the group id is still ours while any member lives.
	if [ -n "$now" ] && [ -d "$W/logs" ]; then # peak memory, for the record
		printf '%s\t%s\n' "$n" "$(grep -E '^VmHWM' "/proc/$pid/status" 2>/dev/null | tr -s ' \t' ' ')" \
			>>"$W/logs/peak-rss.txt"
	fi
	if group_alive "$pid"; then
		kill -TERM -- "-$pid" 2>/dev/null
		for ((i = 0; i < GRACE * 10; i++)); do
			group_alive "$pid" || break
			sleep 0.1
		done
		if group_alive "$pid"; then
			log "$n: still running after ${GRACE}s, SIGKILL"
			kill -KILL -- "-$pid" 2>/dev/null
			for ((i = 0; i < 50; i++)); do
				group_alive "$pid" || break
				sleep 0.1
			done
		fi
		log "$n stopped (pid $pid)"
	fi
	rm -f "$f"
}

T0=$(date +%s)
for n in watchdog kube-scheduler kwok kube-apiserver etcd; do
	stop "$n"
done
for f in "$W"/run/*.pid; do # anything else a newer cluster-up.sh recorded
	[ -f "$f" ] || continue
	n=$(basename "$f" .pid)
	stop "$n"
done
[ "${KEEP_E2E_DATA:-}" = 1 ] || rm -rf "$W/etcd"
log "done in $(($(date +%s) - T0))s (logs kept in $W/logs)"
