#!/bin/sh
# Benchmarks on a netbed of 10 hosts (root): the scheduler on host1, workers w2..w9 on
# host2..host9, the client on host10, every link shaped to RATE Mbit/s each way (default 500)
# with DELAY ms (default 0.2; needs the kernel's netem, else 0 and said so on stderr).
#   tests/netbed/bench.sh BIN_DIR        # BIN_DIR: the build's bin/ (daemons, spw-netbed-bench)
# Prints JSON lines (spillway-bench's conventions):
#   {"case":"broadcast_hosts","hosts":k,"link_mbit":M,"bytes":B,"seconds":S}   k = 1, 2, 4, 8
#   {"case":"transfer_hosts","link_mbit":M,"bytes":B,"gbps":G,...}             w2 to w3
#   {"case":"tiny_tasks_hosts","hosts":8,"tasks_per_s":R,"delay_ms":D,...}     20,000 noops
# Every process is stopped by pid at the end, and the bed removed, whatever happens.
# Environment: RATE, DELAY, REPS (best of, default 3), BYTES (default 64 MiB), TINY (20000).
set -eu
[ $# -ge 1 ] || { echo "usage: tests/netbed/bench.sh BIN_DIR" >&2; exit 2; }
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
RATE=${RATE:-500}
DELAY=${DELAY:-0.2}
REPS=${REPS:-3}
BYTES=${BYTES:-67108864}
TINY=${TINY:-20000}
NW=8

if [ "${2:-}" != inner ]; then
    exec sh "$HERE/netbed.sh" run $((NW + 2)) --rate "$RATE" --delay "$DELAY" -- \
        sh "$HERE/bench.sh" "$BIN" inner
fi

DIR=$(mktemp -d /tmp/spw-netbed-bench.XXXXXX)
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT

# wait_file PATH: a daemon writes its port file once it serves (this is a benchmark script,
# polling is fine here).
wait_file() {
    n=0
    while [ ! -s "$1" ]; do
        n=$((n + 1))
        [ $n -lt 300 ] || { echo "bench: $1 never appeared" >&2; cat "$DIR"/*.log >&2; exit 1; }
        sleep 0.1
    done
}

sh "$NETBED" exec host1 "$BIN/spillway-scheduler" --listen host1:7400 \
    --port-file "$DIR/sched.port" >"$DIR/sched.out" 2>"$DIR/sched.log" &
PIDS="$PIDS $!"
wait_file "$DIR/sched.port"
i=2
while [ $i -le $((NW + 1)) ]; do
    sh "$NETBED" exec "host$i" "$BIN/spillway-worker" --scheduler host1:7400 \
        --listen "host$i:0" --name "w$i" --slots 1 --store-capacity 512M --spill-dir none \
        --port-file "$DIR/w$i.port" >"$DIR/w$i.out" 2>"$DIR/w$i.log" &
    PIDS="$PIDS $!"
    i=$((i + 1))
done
i=2
while [ $i -le $((NW + 1)) ]; do
    wait_file "$DIR/w$i.port"
    i=$((i + 1))
done

client() {
    sh "$NETBED" exec "host$((NW + 2))" "$BIN/spw-netbed-bench" host1:7400 "$@"
}
for k in 1 2 4 8; do
    client broadcast "$k" "$BYTES" "$RATE" "$REPS"
done
client transfer "$BYTES" "$RATE" "$REPS"
client tiny "$TINY" "$NW" "$NETBED_DELAY_MS"
