#!/bin/sh
# Installs spillway as system services, as root, from the repository root:
#   deploy/install.sh                      # build (Release, no tests) and install under /usr/local
#   PREFIX=/usr deploy/install.sh          # ...under /usr (units in systemd's own directory)
#   SPW_BUILD_DIR=DIR deploy/install.sh    # install DIR, already built, without rebuilding
# Then: systemctl enable --now spillway-scheduler spillway-worker@1
#
# Steps: `cmake --install` (programs, library, headers, pkg-config and CMake files, man pages,
# systemd units, sysusers.d and tmpfiles.d entries, examples); ldconfig, so programs linked
# with -lspillway find the library; systemd-sysusers (the `spillway` user and group);
# a random cluster secret in /etc/spillway/secret unless one exists; systemd-tmpfiles (mode
# 0640, owner root, group spillway); example configs copied to /etc/spillway unless present;
# systemctl daemon-reload. Running it again changes nothing that exists.
set -eu
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
if [ -n "${SPW_BUILD_DIR:-}" ]; then
    BUILD=$SPW_BUILD_DIR
else
    BUILD=build-install
    sh deploy/deps.sh
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
        -DCMAKE_INSTALL_PREFIX="$PREFIX" >/dev/null
    cmake --build "$BUILD" -j "$(nproc)"
fi
cmake --install "$BUILD"
# Where cmake put the sysusers.d and tmpfiles.d entries (under the prefix, or systemd's dirs).
cache_get() { sed -n "s|^$1:[A-Z]*=||p" "$BUILD/CMakeCache.txt"; }
under_prefix() { case "$1" in /*) echo "$1" ;; *) echo "$(cache_get CMAKE_INSTALL_PREFIX)/$1" ;; esac; }
SYSUSERS=$(under_prefix "$(cache_get SPW_SYSTEMD_SYSUSERSDIR)")/spillway.conf
TMPFILES=$(under_prefix "$(cache_get SPW_SYSTEMD_TMPFILESDIR)")/spillway.conf
CONFDIR=$(cache_get SPW_CONFDIR)
ldconfig
if command -v systemd-sysusers >/dev/null; then
    systemd-sysusers "$SYSUSERS"
else # no systemd: what the sysusers.d entry says, by hand
    getent group spillway >/dev/null || groupadd --system spillway
    getent passwd spillway >/dev/null || useradd --system --gid spillway \
        --home-dir /var/lib/spillway --shell /usr/sbin/nologin spillway
fi
install -d -m 0755 "$CONFDIR"
if [ ! -f "$CONFDIR/secret" ]; then
    (umask 077 && head -c 32 /dev/urandom | base64 > "$CONFDIR/secret")
fi
if command -v systemd-tmpfiles >/dev/null; then
    systemd-tmpfiles --create "$TMPFILES"
else
    chown root:spillway "$CONFDIR/secret"
    chmod 0640 "$CONFDIR/secret"
fi
[ -f "$CONFDIR/scheduler.conf" ] || install -m 0644 deploy/scheduler.conf "$CONFDIR/scheduler.conf"
[ -f "$CONFDIR/worker-1.conf" ] || install -m 0644 deploy/worker.conf "$CONFDIR/worker-1.conf"
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
echo "installed under $PREFIX; start with: systemctl enable --now spillway-scheduler spillway-worker@1"
echo "let a user submit jobs: usermod -aG spillway USER (then log in again)"
