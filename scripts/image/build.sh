#!/usr/bin/env bash
# Build the extender image from the repository's Dockerfile, unchanged, with buildah and no registry.
#
# usage: scripts/image/build.sh           prints the image's name (localhost/topogang:src-<hash>) on stdout
#        scripts/image/build.sh --env     prints the CONTAINERS_STORAGE_CONF=... line for other buildah calls
#
# No Docker engine and no registry are needed: the FROM line's Python base is replaced by a Debian stand-in
# (scripts/image/standin.sh) stored under that exact name, and `buildah bud --pull=never --isolation chroot`
# builds the Dockerfile as it is, with the machine's CA bundle mounted so pip reaches the package index.
# Everything lives in buildah storage of its own under ~/.cache/topogang-image (TOPOGANG_IMAGE_HOME):
# the stand-in is made once (~2 min), the image is tagged with a hash of the Dockerfile and of every file
# its COPY lines take, and a matching tag is reused as it is (well under a second). A change in the
# sources rebuilds from buildah's layer cache, so only the layers after the first changed COPY run again.
# Needs root, buildah and debootstrap (.ci/run installs them).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${TOPOGANG_IMAGE_HOME:-$HOME/.cache/topogang-image}
CA_BUNDLE=${TOPOGANG_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
export CONTAINERS_STORAGE_CONF=$CACHE/storage.conf

log() { printf '[%s] image: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

if [ "${1:-}" = "--env" ]; then
	echo "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF"
	exit 0
fi

[ "$(id -u)" = 0 ] || die "needs root (buildah's chroot isolation and debootstrap)"
for tool in buildah debootstrap; do
	command -v "$tool" >/dev/null || die "$tool is not installed (apt-get install -y buildah debootstrap)"
done

# overlay where the kernel lets us mount it (layers share their files), else vfs (a full copy per layer,
# several GB, but it works in any sandbox); each driver has its own storage
mkdir -p "$CACHE"
driver=${TOPOGANG_IMAGE_STORAGE_DRIVER:-}
if [ -z "$driver" ]; then
	probe=$(mktemp -d "$CACHE/probe.XXXXXX")
	mkdir "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
	if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
		"$probe/merged" 2>/dev/null; then
		umount "$probe/merged"
		driver=overlay
	else
		driver=vfs
	fi
	rm -rf --one-file-system "$probe"
fi
cat >"$CONTAINERS_STORAGE_CONF" <<EOF
[storage]
driver = "$driver"
graphroot = "$CACHE/storage-$driver"
runroot = "$CACHE/run-$driver"
EOF

cd "$ROOT"
base=$(awk 'toupper($1) == "FROM" { print $2; exit }' Dockerfile)
[ -n "$base" ] || die "Dockerfile: no FROM line"
case "$base" in
*/*/*) qualified=$base ;;
*/*) qualified=docker.io/$base ;;
*) qualified=docker.io/library/$base ;;
esac

# The files the image is made of: the Dockerfile's COPY sources (flags and the destination left out)
mapfile -t sources < <(awk 'toupper($1) == "COPY" { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' Dockerfile)
[ "${#sources[@]}" -gt 0 ] || die "Dockerfile: no COPY line"
hash=$(
	find Dockerfile .dockerignore scripts/image/standin.sh scripts/image/build.sh "${sources[@]}" -type f \
		-not -path '*/__pycache__/*' -not -name '*.pyc' -not -path '*.egg-info/*' -print0 |
		sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
)
image=localhost/topogang:src-$hash

if buildah inspect --type image "$image" >/dev/null 2>&1; then
	log "cached: $image (Dockerfile and sources unchanged)"
else
	standin_rev=$(sha256sum "$HERE/standin.sh" | cut -c1-16)
	have=$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "topogang.standin"}}' \
		"$qualified" 2>/dev/null || true)
	if [ "$have" != "$standin_rev" ]; then
		bash "$HERE/standin.sh" "$qualified" "$standin_rev"
	fi
	[ -r "$CA_BUNDLE" ] || die "no CA bundle at $CA_BUNDLE (TOPOGANG_CA_BUNDLE)"
	log "building $image from Dockerfile (FROM $base: the local stand-in, --pull=never)"
	start=$(date +%s)
	buildah bud --pull=never --isolation chroot --layers --quiet \
		--volume "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro" \
		--tag "$image" --file Dockerfile . >/dev/null
	log "built in $(($(date +%s) - start)) s"
	# earlier builds' tags go; their layers shared with this one stay as its cache
	buildah images --noheading --format '{{.Name}}:{{.Tag}}' 2>/dev/null |
		grep '^localhost/topogang:src-' | grep -vx "$image" | xargs -r buildah rmi >/dev/null 2>&1 || true
	buildah rmi --prune >/dev/null 2>&1 || true
fi
log "$image: $(buildah images --noheading --format '{{.Size}}' "$image") (base $base stand-in:" \
	"$(buildah images --noheading --format '{{.Size}}' "$qualified"))"
echo "$image"
