#!/bin/sh
# Installs the Debian 12 packages spillway needs to build and test, when any is missing.
# Sourced or run by deploy/demo.sh and tests/run.sh; needs root (or sudo) only if something is
# missing. SPW_EXTRA_PACKAGES adds to the list (tests/run.sh: valgrind, and chromium for the
# dashboard test). libmicrohttpd and dygraphs build the scheduler's HTTP endpoint; python3's
# Prometheus client parses /metrics in the tests.
set -e
SPW_PACKAGES="build-essential cmake pkg-config libuv1-dev libmsgpack-dev liblmdb-dev libzstd-dev \
libsodium-dev libssl-dev libxxhash-dev uthash-dev libjansson-dev libcmocka-dev scdoc procps libmicrohttpd-dev \
libjs-dygraphs python3-prometheus-client iproute2 ${SPW_EXTRA_PACKAGES:-}"
missing=""
for p in $SPW_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "installing:$missing"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi
