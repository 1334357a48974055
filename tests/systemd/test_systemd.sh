#!/bin/bash
# The systemd test (label systemd): boots a Debian 12 container with systemd-nspawn, installs the
# build there as an operator would (cmake --install, deploy/install.sh) and runs
# in_container.sh under that container's systemd. Exit 77 (ctest: skipped) with the reason when
# this machine cannot do it: not root, no systemd-nspawn/debootstrap to be had, no base image,
# or a container that does not boot.
#   test_systemd.sh BUILD_DIR SOURCE_DIR
# The base image (debootstrap, a few minutes the first time) is cached in
# $SPW_NSPAWN_CACHE (/var/tmp/spillway-nspawn), one per package list.
set -euo pipefail
B=$(realpath "$1")
SRC=$(realpath "$2")
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (systemd-nspawn, debootstrap)"
if ! command -v systemd-nspawn >/dev/null || ! command -v debootstrap >/dev/null; then
    SPW_EXTRA_PACKAGES="systemd-container debootstrap" sh "$SRC/deploy/deps.sh" >/dev/null 2>&1 ||
        skip "systemd-container and debootstrap are not installed and apt-get could not install them"
fi

# The base image: Debian 12 with systemd and what building against spillway needs.
PKGS="systemd,systemd-sysv,dbus,build-essential,cmake,pkg-config,libuv1-dev,libmsgpack-dev,\
liblmdb-dev,libzstd-dev,libsodium-dev,libssl-dev,libxxhash-dev,uthash-dev,libjansson-dev,libmicrohttpd-dev,procps"
CACHE=${SPW_NSPAWN_CACHE:-/var/tmp/spillway-nspawn}
mkdir -p "$CACHE"
IMG=$CACHE/bookworm-$(echo "$PKGS" | sha256sum | cut -c1-12)
exec 9>"$CACHE/lock"
flock 9
if [ ! -d "$IMG" ]; then
    echo "building the base image $IMG (debootstrap)"
    rm -rf "$IMG.tmp"
    if ! debootstrap --variant=minbase --include="$PKGS" bookworm "$IMG.tmp" \
            "${SPW_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$CACHE/debootstrap.log" 2>&1; then
        tail -5 "$CACHE/debootstrap.log"
        rm -rf "$IMG.tmp"
        skip "debootstrap of Debian 12 failed (log: $CACHE/debootstrap.log)"
    fi
    mv "$IMG.tmp" "$IMG"
fi
flock -u 9

T=$(mktemp -d "${TMPDIR:-/tmp}/spillway-systemd.XXXXXX")
NSPAWN_PID=""
cleanup() {
    [ -z "$NSPAWN_PID" ] || kill -KILL "$NSPAWN_PID" 2>/dev/null || true
    [ -z "$NSPAWN_PID" ] || wait "$NSPAWN_PID" 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT
mkdir "$T/out"
{
    echo "B=$B"
    echo "SRC=$SRC"
    cat "$SRC/tests/systemd/in_container.sh"
} >"$T/out/run.sh"
binds=(--bind="$SRC")
case "$B/" in "$SRC"/*) ;; *) binds+=(--bind="$B") ;; esac
# --volatile=overlay: the image stays untouched, the container writes to a tmpfs above it.
# --private-network: the container has its own loopback, so the units' 127.0.0.1:7400 is its
# own. --register=no: no machined needed; without a systemd on the host (a container), no bus
# either: --keep-unit runs it in our own cgroup instead of a transient scope.
host_flags=(--register=no)
[ -d /run/systemd/system ] || host_flags+=(--keep-unit)
timeout 500 systemd-nspawn -D "$IMG" --volatile=overlay --private-network "${host_flags[@]}" \
    -M "spw-test-$$" "${binds[@]}" --bind="$T/out:/spw-out" \
    --bind-ro="$SRC/tests/systemd/spw-systemd-test.service:/etc/systemd/system/spw-systemd-test.service" \
    -b -- systemd.wants=spw-systemd-test.service </dev/null >"$T/console.log" 2>&1 &
NSPAWN_PID=$!
rc=0
wait "$NSPAWN_PID" || rc=$?
NSPAWN_PID=""
[ ! -f "$T/out/log" ] || cat "$T/out/log"
if [ ! -f "$T/out/result" ]; then
    if ! grep -q "Welcome to" "$T/console.log"; then
        echo "--- systemd-nspawn (exit status $rc):"
        sed 's/\x1b\[[0-9;]*m//g' "$T/console.log" | tail -20
        skip "systemd-nspawn cannot boot a container here (exit status $rc, output above)"
    fi
    echo "--- console:"
    sed 's/\x1b\[[0-9;]*m//g' "$T/console.log" | tail -40
    echo "FAIL: the container booted but the test did not finish (nspawn exit status $rc)"
    exit 1
fi
[ "$(cat "$T/out/result")" = 0 ] || exit 1
echo "OK"
