#!/bin/sh
# Installs spillway as system services: builds, runs `cmake --install` (binaries, library,
# headers, systemd units, example configs), creates the `spillway` service user, writes a
# random cluster secret readable only by that user, and reloads systemd. Run as root from the
# repository root. Then: systemctl enable --now spillway-scheduler spillway-worker@1
set -eu
cd "$(dirname "$0")/.."
sh deploy/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
cmake --install build
getent group spillway >/dev/null || groupadd --system spillway
getent passwd spillway >/dev/null ||
    useradd --system --gid spillway --home-dir /var/lib/spillway --shell /usr/sbin/nologin spillway
install -d -m 0755 /etc/spillway
if [ ! -f /etc/spillway/secret ]; then
    umask 077
    head -c 32 /dev/urandom | base64 > /etc/spillway/secret
fi
chown spillway:spillway /etc/spillway/secret
chmod 0600 /etc/spillway/secret
[ -f /etc/spillway/scheduler.conf ] || install -m 0644 deploy/scheduler.conf /etc/spillway/scheduler.conf
[ -f /etc/spillway/worker-1.conf ] || install -m 0644 deploy/worker.conf /etc/spillway/worker-1.conf
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
echo "installed; start with: systemctl enable --now spillway-scheduler spillway-worker@1"
