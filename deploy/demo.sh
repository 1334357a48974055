#!/bin/sh
# Builds spillway and runs the demo: a scheduler and two workers on 127.0.0.1 with a cluster
# secret, a real job through libspillway (client/examples/demo.c), a program that uploads its own
# plugin and runs it (client/examples/plugin_demo.c), the cluster's status, then a clean stop.
#   ./deploy/demo.sh          # from the repository root; installs missing Debian packages
set -eu
cd "$(dirname "$0")/.."
sh deploy/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"
B=build/bin
D=$(mktemp -d /tmp/spillway-demo.XXXXXX)
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    rm -rf "$D"
}
trap cleanup EXIT INT TERM
wait_file() { # path seconds
    i=0
    while [ ! -s "$1" ]; do
        i=$((i + 1)); [ $i -le $(($2 * 10)) ] || { echo "timed out waiting for $1"; cat "$D"/*.log; exit 1; }
        sleep 0.1
    done
}
echo "=== starting a scheduler and two workers on 127.0.0.1"
# A secret: uploaded plugins run only in a cluster that has one. The client and spillway-ctl
# find it through SPILLWAY_SECRET_FILE.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$D/secret"
chmod 0600 "$D/secret"
export SPILLWAY_SECRET_FILE="$D/secret"
$B/spillway-scheduler --secret-file "$D/secret" --listen 127.0.0.1:0 --port-file "$D/scheduler.addr" --http 127.0.0.1:0 \
    --http-port-file "$D/http.addr" >"$D/scheduler.out" 2>"$D/scheduler.log" &
PIDS="$!"
wait_file "$D/scheduler.addr" 10
ADDR=$(cat "$D/scheduler.addr")
for i in 1 2; do
    $B/spillway-worker --secret-file "$D/secret" --scheduler "$ADDR" --slots 1 --store-capacity 512M --name "demo-worker-$i" \
        --port-file "$D/worker$i.addr" >"$D/worker$i.out" 2>"$D/worker$i.log" &
    PIDS="$! $PIDS"
done
wait_file "$D/worker1.addr" 10
wait_file "$D/worker2.addr" 10
echo "scheduler $ADDR, workers $(cat "$D/worker1.addr") $(cat "$D/worker2.addr")"
echo "dashboard and /metrics: http://$(cat "$D/http.addr")/"
echo "=== running client/examples/demo.c"
rc=0
$B/spillway-demo "$ADDR" || rc=$?
echo "=== running client/examples/plugin_demo.c (uploads worker/examples/plugin_upper.c)"
$B/spillway-plugin-demo "$ADDR" build/lib/upper.so || rc=$?
echo "=== spillway-ctl plugins"
$B/spillway-ctl --scheduler "$ADDR" plugins || rc=$?
echo "=== spillway-ctl status"
$B/spillway-ctl --scheduler "$ADDR" status || rc=$?
echo "=== spillway-ctl jobs"
$B/spillway-ctl --scheduler "$ADDR" jobs || rc=$?
echo "=== stopping the cluster"
for p in $PIDS; do
    kill -TERM "$p"
    if ! wait "$p"; then echo "process $p did not exit cleanly"; rc=1; fi
done
PIDS=""
[ $rc -eq 0 ] && echo "=== demo OK" || { echo "=== demo FAILED"; cat "$D"/*.log; }
exit $rc
