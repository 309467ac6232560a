#!/usr/bin/env bash
# Build the e2e control-plane binaries from Go modules into ~/.cache/topogang-e2e/<versions>/bin
# (outside the repo; nothing here is ever committed). Recipe §1, §2, §6.1 (see scripts/e2e/README.md);
# deviations are marked "Changed vs recipe".
#
# usage: scripts/e2e/build-bins.sh [--print-bin-dir] [TARGET...]
#   TARGET: etcd kube-apiserver kube-scheduler kwok helm frameworkcontroller frameworkbarrier kueue   (default: all)
#   The first five are required (exit 1 if one fails). The FrameworkController pair and Kueue (used only by
#   `make bench-peers` and its smoke test) are optional: a failure is
#   printed loudly and remembered (stamps/<name>.failed), and the script still exits 0 when the required ones exist.
#
# Idempotent: each binary has a stamp file holding its build key (version, recipe revision, `go version`);
# a binary whose stamp matches is not rebuilt, so a warm run takes well under a second per binary.
# Cold-build measurements (wall/CPU seconds, peak RSS, size) are appended to $E2E_HOME/build-report.tsv.
#
# Measured (2026-11-22, 2 shared cores, -p=1, nice 19, load ~3 from other engineers, empty Go caches):
#   etcd 138 s (114 s compile; 26 MB; peak RSS 0.4 GB) · kube-apiserver 895 s (incl. 85 s download + tidy;
#   99 MB; 1.7 GB) · kube-scheduler 47 s (shares the apiserver's build cache; 69 MB; 1.3 GB) · kwok 328 s
#   (61 MB; 0.9 GB) => 23.5 min for the required four; frameworkcontroller 88 s (20 MB) + frameworkbarrier 2 s
#   (19 MB). Caches afterwards: GOMODCACHE ~1.4 GB, GOCACHE ~3.4 GB, bin/ 292 MB. Warm run: 0.2 s.
#
# env: TOPOGANG_E2E_HOME, TOPOGANG_E2E_BIN (see versions.sh), TOPOGANG_E2E_GO_P (go build -p, default 1:
#      the dev machines have 2 cores shared between engineers), TOPOGANG_FC_SRC (FrameworkController source:
#      a git directory or a source tree; used only when the module proxy does not serve the module),
#      TOPOGANG_E2E_REBUILD=1 (ignore stamps).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

# Bump when the way a binary is built changes, so stale caches are rebuilt.
RECIPE_REV=1
REQUIRED=(etcd kube-apiserver kube-scheduler kwok helm)
OPTIONAL=(frameworkcontroller frameworkbarrier kueue)

log() { printf '[%s] build-bins: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

if [ "${1:-}" = "--print-bin-dir" ]; then
	echo "$E2E_BIN"
	exit 0
fi
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${REQUIRED[@]}" "${OPTIONAL[@]}")

if ! command -v go >/dev/null 2>&1; then
	log "no Go toolchain on PATH or at /usr/local/go (needs Go >= 1.26 and the Go module proxy)"
	exit 3
fi

mkdir -p "$E2E_BIN" "$E2E_HOME/src" "$E2E_HOME/stamps" "$E2E_HOME/logs" "$E2E_HOME/kwok-stages"
# One build at a time per cache dir (pytest and a developer may call this concurrently).
exec 9>"$E2E_HOME/.lock"
flock 9

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off
# -p=1: one package compiled at a time, and every go command runs under `nice -n 19` (shared 2-core machines).
export GOFLAGS="-buildvcs=false -p=${TOPOGANG_E2E_GO_P:-1}"
GO_VERSION=$(go env GOVERSION)
GO=(nice -n 19 go)

key_of() { printf '%s %s recipe=%s %s\n' "$1" "$2" "$RECIPE_REV" "$GO_VERSION"; }
version_of() {
	case $1 in
	etcd) echo "$ETCD_VERSION" ;;
	kube-apiserver | kube-scheduler) echo "$K8S_VERSION" ;;
	kwok) echo "$KWOK_VERSION" ;;
	helm) echo "$HELM_VERSION" ;;
	frameworkcontroller | frameworkbarrier) echo "$FC_VERSION" ;;
	kueue) echo "$KUEUE_VERSION" ;;
	*) die "unknown target $1" ;;
	esac
}
is_fresh() { # NAME: binary present and stamp matches
	local n=$1
	[ "${TOPOGANG_E2E_REBUILD:-}" != 1 ] && [ -x "$E2E_BIN/$n" ] && [ -f "$E2E_HOME/stamps/$n" ] &&
		[ "$(cat "$E2E_HOME/stamps/$n")" = "$(key_of "$n" "$(version_of "$n")")" ]
}

# timed NAME OUT CMD...: run CMD (which must write the binary to OUT), measure it, install the binary atomically,
# write the stamp.
timed() {
	local n=$1 out=$2 t0 t1 tf
	shift 2
	rm -f "$out"
	tf="$E2E_HOME/logs/$n.time"
	t0=$(date +%s)
	if [ -x /usr/bin/time ]; then
		/usr/bin/time -f '%e %U %S %M' -o "$tf" "$@" || die "$n: build command failed"
	else
		"$@" || die "$n: build command failed"
		echo "? ? ? ?" >"$tf"
	fi
	t1=$(date +%s)
	[ -s "$out" ] || die "$n: build produced no binary"
	# Same filesystem -> atomic rename: a half-written file is never mistaken for a build.
	mv -f "$out" "$E2E_BIN/$n"
	key_of "$n" "$(version_of "$n")" >"$E2E_HOME/stamps/$n"
	rm -f "$E2E_HOME/stamps/$n.failed"
	read -r wall user sys rss <"$tf"
	printf '%s\t%s\twall_s=%s\tuser_s=%s\tsys_s=%s\tmaxrss_kb=%s\tsize_bytes=%s\tinclusive_wall_s=%s\n' \
		"$(date -u +%FT%TZ)" "$n" "$wall" "$user" "$sys" "$rss" "$(stat -c %s "$E2E_BIN/$n")" "$((t1 - t0))" \
		>>"$E2E_HOME/build-report.tsv"
	log "$n: built in ${wall}s wall (user ${user}s, sys ${sys}s, peak RSS ${rss} KiB), $(du -h "$E2E_BIN/$n" | cut -f1)"
}

# ---------------------------------------------------------------------------------------------------------------
# kube-apiserver / kube-scheduler: wrapper module around k8s.io/kubernetes (recipe §1.3–1.5)
K8S_SRC="$E2E_HOME/src/k8s"
k8s_wrapper() {
	[ -f "$K8S_SRC/.ready" ] && return 0
	local sv="v0.${K8S_VERSION#v1.}" kmod pin
	log "k8s wrapper: downloading k8s.io/kubernetes@$K8S_VERSION (large zip, first time only)"
	# Run outside any module (E2E_HOME holds no go.mod).
	(cd "$E2E_HOME" && "${GO[@]}" mod download k8s.io/kubernetes@"$K8S_VERSION")
	kmod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
	[ -f "$kmod" ] || die "k8s wrapper: $kmod missing after download"
	pin=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$kmod")
	[ "$pin" = "$ETCD_VERSION" ] || log "WARNING: k8s $K8S_VERSION pins etcd server $pin, building etcd $ETCD_VERSION"
	mkdir -p "$K8S_SRC"
	{
		echo "module topogang.local/e2e-k8s-bins"
		echo
		grep -E '^(go|godebug) ' "$kmod"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		echo "replace ("
		# Every staging module: required at v0.0.0 or replaced to ./staging in k8s' go.mod (recipe §1.4).
		{
			awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$kmod"
			awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$kmod"
		} | sort -u | while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$sv"; done
		echo ")"
	} >"$K8S_SRC/go.mod"
	cat >"$K8S_SRC/tools.go" <<'EOF'
//go:build tools

// Keeps (and checksums) everything the two main packages import; main packages themselves cannot be imported.
package tools

import (
	_ "k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
EOF
	log "k8s wrapper: go mod tidy (resolves ~170 modules)"
	(cd "$K8S_SRC" && "${GO[@]}" mod tidy)
	touch "$K8S_SRC/.ready"
}
build_k8s() { # NAME
	local n=$1 minor ld p
	k8s_wrapper
	minor=$(cut -d. -f2 <<<"$K8S_VERSION")
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
		ld+=" -X $p.gitCommit=unknown -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	(cd "$K8S_SRC" && timed "$n" "$E2E_BIN/$n.tmp" "${GO[@]}" build -mod=mod -trimpath -ldflags "$ld" -o "$E2E_BIN/$n.tmp" \
		"k8s.io/kubernetes/cmd/$n")
}

# ---------------------------------------------------------------------------------------------------------------
# etcd: wrapper module requiring go.etcd.io/etcd/server/v3 (a main package); no replace needed (recipe §1.6)
build_etcd() {
	local src="$E2E_HOME/src/etcd"
	mkdir -p "$src"
	printf 'module topogang.local/e2e-etcd-bin\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
		"$ETCD_VERSION" >"$src/go.mod"
	# Changed vs recipe: `go get` first so go.mod/go.sum list every dependency, then a plain build.
	(cd "$src" && "${GO[@]}" get go.etcd.io/etcd/server/v3@"$ETCD_VERSION")
	(cd "$src" && timed etcd "$E2E_BIN/etcd.tmp" "${GO[@]}" build -mod=mod -trimpath -ldflags "-s -w" -o "$E2E_BIN/etcd.tmp" \
		go.etcd.io/etcd/server/v3)
}

# ---------------------------------------------------------------------------------------------------------------
# kwok: plain `go install pkg@version` (its go.mod has no replace) + the stage YAMLs it no longer embeds (§2.1/2.2)
build_kwok() {
	local gobin="$E2E_BIN/.gobin" kw f
	# Run outside any module; GOBIN inside the bin dir keeps the final rename on one filesystem.
	(cd "$E2E_HOME" && timed kwok "$gobin/kwok" env GOBIN="$gobin" "${GO[@]}" install -trimpath -ldflags "-s -w" \
		sigs.k8s.io/kwok/cmd/kwok@"$KWOK_VERSION")
	kw="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		install -m 0644 "$kw/$f" "$E2E_HOME/kwok-stages/"
	done
}

# ---------------------------------------------------------------------------------------------------------------
# helm: plain `go install helm.sh/helm/v4/cmd/helm@version` (its go.mod has no replace; go 1.26.0). The version
# flag is what helm's own Makefile sets (-X helm.sh/helm/v4/internal/version.version).
build_helm() {
	local gobin="$E2E_BIN/.gobin"
	(cd "$E2E_HOME" && timed helm "$gobin/helm" env GOBIN="$gobin" "${GO[@]}" install -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" helm.sh/helm/v4/cmd/helm@"$HELM_VERSION")
}

# ---------------------------------------------------------------------------------------------------------------
# FrameworkController (frameworkcontroller, frameworkbarrier), github.com/microsoft/frameworkcontroller.
# Not in the recipe. Facts (checked on the dev machine):
#   - The module proxy serves github.com/microsoft/frameworkcontroller@v1.0.1 (the last tag; HEAD only adds docs)
#     when asked for that exact version, but answers 403 "This module version is not available" to @v/list,
#     @latest and @master, so `go list -m -versions` shows nothing. Hence an exact FC_VERSION. (github.com itself
#     does not resolve here.) If a proxy refuses the version too, TOPOGANG_FC_SRC may name a git clone or a
#     source tree of the repository; its dependencies still come from the module proxy.
#   - Its go.mod is old (go 1.12, k8s.io/client-go v0.16.15, vendor/), and `go install ...@v1.0.1` would work
#     (no replace directives) but would build with those exact, pre-Go-1.18 dependencies.
# Build = wrapper module requiring the FC module, `replace`d by a local copy (its vendor/ dropped: only a main
# module's vendor/ is used), plus upgrades needed by modern Go:
#   github.com/modern-go/reflect2 v1.0.1 -> v1.0.2: v1.0.1 assumes the pre-Go-1.18 runtime map-iterator layout
#     and can crash when json-iterator encodes a map under Go >= 1.18 (modern-go/reflect2#26,
#     json-iterator/go#681); v1.0.2 is the fixed release, and Go >= 1.24 keeps the reflect.mapiterinit shim it
#     relies on (modern-go/reflect2#32). client-go 0.16 (FC's client) encodes objects with json-iterator.
#     Precautionary: a frameworkbarrier built with v1.0.1 and Go 1.26 did link and pass a smoke run.
#   github.com/json-iterator/go v1.1.7 -> v1.1.12: the release that requires reflect2 v1.0.2.
FC_SRC_DIR="$E2E_HOME/src/fc-src"
FC_MOD="$E2E_HOME/src/fc"
fc_source() {
	[ -f "$FC_SRC_DIR/.ready" ] && return 0
	local dir="" err="$E2E_HOME/logs/fc-proxy.err"
	rm -rf "$FC_SRC_DIR"
	mkdir -p "$FC_SRC_DIR"
	dir=$(cd "$E2E_HOME" && go mod download -json "github.com/microsoft/frameworkcontroller@$FC_VERSION" 2>"$err" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p') || true
	if [ -n "$dir" ] && [ -f "$dir/go.mod" ]; then
		log "frameworkcontroller: source from the module proxy ($dir)"
		cp -r "$dir"/. "$FC_SRC_DIR"/
		chmod -R u+w "$FC_SRC_DIR"
	elif [ -n "${TOPOGANG_FC_SRC:-}" ]; then
		log "frameworkcontroller: $FC_VERSION not on the module proxy; source from TOPOGANG_FC_SRC=$TOPOGANG_FC_SRC"
		if git -C "$TOPOGANG_FC_SRC" rev-parse --git-dir >/dev/null 2>&1; then
			git -C "$TOPOGANG_FC_SRC" archive "$FC_VERSION" | tar -x -C "$FC_SRC_DIR"
		elif [ -f "$TOPOGANG_FC_SRC/go.mod" ]; then
			cp -r "$TOPOGANG_FC_SRC"/. "$FC_SRC_DIR"/
		else
			die "TOPOGANG_FC_SRC=$TOPOGANG_FC_SRC is neither a git repository nor a source tree"
		fi
	else
		die "github.com/microsoft/frameworkcontroller@$FC_VERSION is not available from the Go module proxy" \
			"($(tr '\n' ' ' <"$err")) and TOPOGANG_FC_SRC (a clone of that repository) is not set"
	fi
	grep -q '^module github.com/microsoft/frameworkcontroller$' "$FC_SRC_DIR/go.mod" ||
		die "$FC_SRC_DIR is not github.com/microsoft/frameworkcontroller"
	rm -rf "$FC_SRC_DIR/vendor" "$FC_SRC_DIR/.git"
	touch "$FC_SRC_DIR/.ready"
}
fc_wrapper() {
	[ -f "$FC_MOD/.ready" ] && return 0
	fc_source
	mkdir -p "$FC_MOD"
	cat >"$FC_MOD/go.mod" <<GOMOD
module topogang.local/e2e-fc-bins

go 1.22

require github.com/microsoft/frameworkcontroller $FC_VERSION

// Needed under Go >= 1.18; see build-bins.sh.
require (
	github.com/json-iterator/go v1.1.12
	github.com/modern-go/reflect2 v1.0.2
)

replace github.com/microsoft/frameworkcontroller => ../fc-src
GOMOD
	cat >"$FC_MOD/tools.go" <<'GOSRC'
//go:build tools

package tools

import (
	_ "github.com/microsoft/frameworkcontroller/pkg/barrier"
	_ "github.com/microsoft/frameworkcontroller/pkg/controller"
)
GOSRC
	(cd "$FC_MOD" && "${GO[@]}" mod tidy)
	grep -q 'github.com/modern-go/reflect2 v1.0.2' "$FC_MOD/go.mod" || die "reflect2 upgrade lost by go mod tidy"
	touch "$FC_MOD/.ready"
}
fc_build() { # NAME: frameworkcontroller | frameworkbarrier
	local n=$1
	fc_wrapper
	(cd "$FC_MOD" && timed "$n" "$E2E_BIN/$n.tmp" "${GO[@]}" build -mod=mod -trimpath -ldflags "-s -w" \
		-o "$E2E_BIN/$n.tmp" "github.com/microsoft/frameworkcontroller/cmd/$n")
}

# ---------------------------------------------------------------------------------------------------------------
# Kueue (the peer `make bench-peers` runs beside topogang): plain `go install pkg@version` (its go.mod has no
# replace). The module proxy serves only exact versions it was asked for: `go list -m -versions` shows v0.17.0,
# v0.19.2 answers, and every v0.20.x, v0.19.3..v0.19.12 and v0.21.0-rc.0 answer 403 (checked 2026-11-25), so
# KUEUE_VERSION is v0.19.2. Cold build 2026-11-25: 3125 s wall (541 s user + 110 s sys at nice 19 under a
# load of 12; it compiles its own client-go v0.36 and parts of k8s.io/kubernetes v1.36), 110 MB. Its CRDs are not embedded in the binary: bench-peers reads them from the module
# cache (config/components/crd/bases), which this download fills.
build_kueue() {
	local gobin="$E2E_BIN/.gobin"
	(cd "$E2E_HOME" && timed kueue "$gobin/kueue" env GOBIN="$gobin" "${GO[@]}" install -trimpath -ldflags "-s -w" \
		sigs.k8s.io/kueue/cmd/kueue@"$KUEUE_VERSION")
}

# ---------------------------------------------------------------------------------------------------------------
t_start=$(date +%s)
log "versions: $E2E_VERSIONS; $GO_VERSION; GOFLAGS=$GOFLAGS; bin dir $E2E_BIN"
failed_required=()
for n in "${TARGETS[@]}"; do
	v=$(version_of "$n")
	if is_fresh "$n"; then
		log "$n $v: up to date"
		continue
	fi
	optional=0
	case " ${OPTIONAL[*]} " in *" $n "*) optional=1 ;; esac
	if [ $optional = 1 ] && [ "${TOPOGANG_E2E_REBUILD:-}" != 1 ] && [ -f "$E2E_HOME/stamps/$n.failed" ] &&
		[ "$(head -n1 "$E2E_HOME/stamps/$n.failed")" = "$(key_of "$n" "$v")" ]; then
		log "WARNING: $n $v was not buildable last time (TOPOGANG_E2E_REBUILD=1 retries): $(tail -n +2 "$E2E_HOME/stamps/$n.failed")"
		continue
	fi
	log "$n $v: building (log: $E2E_HOME/logs/$n.build.log)"
	case $n in
	etcd) fn=(build_etcd) ;;
	kube-apiserver | kube-scheduler) fn=(build_k8s "$n") ;;
	kwok) fn=(build_kwok) ;;
	helm) fn=(build_helm) ;;
	frameworkcontroller | frameworkbarrier) fn=(fc_build "$n") ;;
	kueue) fn=(build_kueue) ;;
	esac
	# Subshell with its own errexit, not in an `if` (that would disable errexit inside it): `die` or any failing
	# step fails only this target.
	t0=$(date +%s)
	set +e
	(
		set -e
		"${fn[@]}"
	) 2>&1 | tee "$E2E_HOME/logs/$n.build.log" >&2
	rc=${PIPESTATUS[0]}
	set -e
	dt=$(($(date +%s) - t0))
	if [ "$rc" = 0 ]; then
		log "$n: done, ${dt}s including downloads and module resolution"
		printf '%s\t%s\ttarget_total_s=%s (incl. downloads, go mod tidy/get)\n' "$(date -u +%FT%TZ)" "$n" "$dt" \
			>>"$E2E_HOME/build-report.tsv"
	else
		reason=$(grep -v '^\[' "$E2E_HOME/logs/$n.build.log" | tail -n 3 | tr '\n' ' ')
		if [ $optional = 1 ]; then
			{
				key_of "$n" "$v"
				echo "$reason"
			} >"$E2E_HOME/stamps/$n.failed"
			log "WARNING: optional $n $v NOT built: $reason"
		else
			log "ERROR: $n $v failed: $reason"
			failed_required+=("$n")
		fi
	fi
done
log "done in $(($(date +%s) - t_start))s"
for n in "${REQUIRED[@]}"; do
	[ -x "$E2E_BIN/$n" ] && log "  $n: $(du -h "$E2E_BIN/$n" | cut -f1)" || log "  $n: missing"
done
[ ${#failed_required[@]} -eq 0 ] || die "required binaries failed: ${failed_required[*]}"
