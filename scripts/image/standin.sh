#!/usr/bin/env bash
# A local stand-in for the Dockerfile's Python base image, for building without a registry.
#
# usage: scripts/image/standin.sh NAME      (NAME: the Dockerfile's FROM image, e.g. python:3.11.13-slim-bookworm)
#
# Debian bookworm (debootstrap --variant=minbase) with Debian's python3 (3.11) and pip, shaped where the
# Dockerfile relies on the official image: `python` and `pip` on PATH under /usr/local/bin, pip allowed to
# install into the system interpreter (no PEP 668 marker: the official image has none), LANG=C.UTF-8,
# groupadd/useradd. The patch release differs (Debian's 3.11.x, not the FROM line's); everything else the
# Dockerfile runs is the same. Committed into the buildah storage named by CONTAINERS_STORAGE_CONF under
# NAME exactly as the FROM line says it (docker.io/library/... for a short name), so `buildah bud
# --pull=never` uses it and nothing is pulled. Needs root, debootstrap and buildah; ~2 min.
set -euo pipefail
NAME=${1:?usage: standin.sh IMAGE-NAME}
SUITE=bookworm
MIRROR=${TOPOGANG_DEBIAN_MIRROR:-http://deb.debian.org/debian}
REVISION=${2:-}

log() { printf '[%s] standin: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/topogang-standin.XXXXXX")
ctr=""
cleanup() {
	[ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1 || true
	# debootstrap mounts proc and sys in the rootfs while it runs: an interrupted run may leave them
	findmnt -rn -o TARGET | grep "^$work/" | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT

log "debootstrap $SUITE (minbase + python3, python3-pip, ca-certificates) from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
	"$SUITE" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
	tail -n 30 "$work/debootstrap.log" >&2
	exit 1
}
r=$work/rootfs
rm -f "$r"/usr/lib/python3*/EXTERNALLY-MANAGED
ln -sf /usr/bin/python3 "$r/usr/local/bin/python"
ln -sf /usr/bin/pip3 "$r/usr/local/bin/pip"
rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb "$r"/dev/*
# the machine's resolver and hosts are bind-mounted at run time; leave none baked in
: >"$r/etc/resolv.conf"

log "importing as $NAME"
tar -C "$r" --numeric-owner --one-file-system -cf "$work/rootfs.tar" .
ctr=$(buildah from scratch)
buildah add --quiet "$ctr" "$work/rootfs.tar" / >/dev/null
buildah config \
	--env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
	--env LANG=C.UTF-8 \
	--cmd python3 \
	--label topogang.standin="$REVISION" \
	--label topogang.standin.of="$NAME" \
	"$ctr"
buildah commit --quiet --rm "$ctr" "$NAME" >/dev/null
ctr=""
log "done: $NAME"
