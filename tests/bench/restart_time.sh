#!/bin/sh
# How long a scheduler takes to come back from its journal with a large graph in it: a
# scheduler with --state-dir and one worker of one slot gets a graph of N tiny tasks
# (spillway-bench scale_tiny), is killed with SIGKILL while the graph runs, and is started again
# on the same directory; the figure is the time from that start to its READY line, with the
# journal's own count of what it restored.
# usage: tests/bench/restart_time.sh [BUILD_DIR] [N]   (defaults: build, 1000000)
set -eu
bin=${1:-build}/bin
n=${2:-1000000}
dir=$(mktemp -d /tmp/spillway-restart.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT

"$bin/spillway-scheduler" --listen 127.0.0.1:0 --http none --port-file "$dir/port" \
    --state-dir "$dir/state" >/dev/null 2>"$dir/sched.log" &
sched=$!
while [ ! -s "$dir/port" ]; do sleep 0.05; done
addr=$(cat "$dir/port")
"$bin/spillway-worker" --scheduler "$addr" --listen 127.0.0.1:0 --slots 1 \
    --store-capacity 256M >/dev/null 2>"$dir/worker.log" &
"$bin/spillway-bench" --scheduler "$addr" --case scale_tiny --n "$n" >"$dir/bench.out" 2>&1 &
# Killed once the whole graph is in (spillway-ctl jobs counts its tasks) and some of it ran.
total() {
    "$bin/spillway-ctl" --scheduler "$addr" --json jobs 2>/dev/null |
        python3 -c 'import json, sys; print(sum(g["tasks"]["total"] for g in json.load(sys.stdin)["graphs"]))' ||
        echo 0
}
until [ "$(total)" -ge "$n" ]; do
    sleep 0.05
done
kill -9 "$sched"
wait "$sched" 2>/dev/null || true
rm -f "$dir/port"
size=$(stat -c %s "$dir/state/journal")
start=$(date +%s%N)
"$bin/spillway-scheduler" --listen "$addr" --http none --port-file "$dir/port" \
    --state-dir "$dir/state" >/dev/null 2>"$dir/sched2.log" &
while [ ! -s "$dir/port" ]; do sleep 0.001; done
end=$(date +%s%N)
echo "restart with n=$n: journal $size bytes, READY after $(((end - start) / 1000000)) ms"
grep "journal" "$dir/sched2.log" | sed 's/^<[0-9]>//'
