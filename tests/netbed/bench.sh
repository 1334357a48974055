#!/bin/sh
# Benchmarks on a netbed of 10 hosts (root): the scheduler on host1, workers w2..w9 on
# host2..host9, the client on host10, every link shaped to RATE Mbit/s each way (default 500)
# with DELAY ms (default 0.2; needs the kernel's netem, else 0 and said so on stderr).
#   tests/netbed/bench.sh BIN_DIR        # BIN_DIR: the build's bin/ (daemons, spw-netbed-bench)
# Prints JSON lines (spillway-bench's conventions):
#   {"case":"broadcast_hosts","hosts":k,"encrypt":E,"link_mbit":M,"bytes":B,"seconds":S}
#                                                                  k = 1, 2, 4, 8
#   {"case":"transfer_hosts","encrypt":E,"link_mbit":M,"bytes":B,"gbps":G,...}  w2 to w3
#       E is "no", or "required" for the same cases (8 hosts) on a second cluster whose
#       daemons and client all run --encrypt required (TLS on every link), started once the
#       first is stopped; both clusters have the same secret, so only encryption differs
#   {"case":"tiny_tasks_hosts","hosts":8,"tasks_per_s":R,"delay_ms":D,...}     20,000 noops
#   {"case":"sort_hosts","hosts":4,"bytes":B,"seconds":S,"limit_s":L,"vs_limit":V,...}
#       SORT_BYTES (2 GiB) sorted with spillway_shuffle by 4 workers on host2..host5 with the
#       example sort plugin (SORT_PLUGIN, default BIN_DIR/../lib/sort.so) and 256 MiB stores,
#       under a scheduler of their own; the limit is the network's: the bytes that must cross
#       the links over what the four links carry at once (every host sends (4 - 1) / 4 of its
#       share), verified against the generator run on the client
#   {"case":"plugin_first_task","first_task_ms":F,"all_workers_ms":A,...}          4 workers
#       spillway-bench's case against a scheduler with a secret and workers on host2..host5:
#       from the upload's return to the first task's result, and to results on all four
#   {"case":"drain_hosts","bytes":B,"spilled_bytes":S,"seconds":T,"link_s":L,"vs_link":V,...}
#       DRAIN_BYTES (1 GiB) put in DRAIN_PUT (64 MiB) puts on worker d2 (host2, the only one up,
#       a store of DRAIN_CAPACITY, 768M, so about half of them spill), then d3..d5 start and
#       spillway-ctl's drain of d2 is timed to its answer; link_s is the bytes over one link
#       (all leave d2 through its own), V = T / L; every put is read back and compared after
# Every process is stopped by pid at the end, and the bed removed, whatever happens.
# Environment: RATE, DELAY, REPS (best of, default 3), BYTES (default 64 MiB), TINY (20000),
# SORT_BYTES, SORT_PARTS (32), SORT_BLOCK (32 MiB), SORT_PLUGIN; CASES (default "all", or
# "sort" for sort_hosts alone, "plugin" for plugin_first_task alone, "drain" for drain_hosts
# alone, or "encrypt" for broadcast_hosts (8) and transfer_hosts plain then encrypted),
# PLUGIN_REPS (7), DRAIN_BYTES, DRAIN_PUT, DRAIN_CAPACITY.
set -eu
[ $# -ge 1 ] || { echo "usage: tests/netbed/bench.sh BIN_DIR" >&2; exit 2; }
BIN=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
RATE=${RATE:-500}
DELAY=${DELAY:-0.2}
REPS=${REPS:-3}
BYTES=${BYTES:-67108864}
TINY=${TINY:-20000}
SORT_BYTES=${SORT_BYTES:-2147483648}
SORT_PARTS=${SORT_PARTS:-32}
SORT_BLOCK=${SORT_BLOCK:-33554432}
SORT_PLUGIN=${SORT_PLUGIN:-$BIN/../lib/sort.so}
DRAIN_BYTES=${DRAIN_BYTES:-1073741824}
DRAIN_PUT=${DRAIN_PUT:-67108864}
DRAIN_CAPACITY=${DRAIN_CAPACITY:-768M}
CASES=${CASES:-all}
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

# wait_file PATH [TENTHS]: a daemon writes its port file once it serves (this is a benchmark
# script, polling is fine here); given up after TENTHS tenths of a second (300).
wait_file() {
    n=0
    while [ ! -s "$1" ]; do
        n=$((n + 1))
        [ $n -lt "${2:-300}" ] || {
            echo "bench: $1 never appeared" >&2
            cat "$DIR"/*.log >&2
            exit 1
        }
        sleep 0.1
    done
}

# A secret for both clusters (the encrypted one needs it; the plain one authenticates alike).
SECRET="$DIR/secret"
od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$SECRET"
chmod 600 "$SECRET"

# start_cluster ENCRYPT: the scheduler on host1:7400 and workers w2..w9, every daemon with
# --encrypt ENCRYPT; their pids in CLUSTER.
start_cluster() {
    CLUSTER=""
    rm -f "$DIR"/*.port
    sh "$NETBED" exec host1 "$BIN/spillway-scheduler" --listen host1:7400 --http none \
        --secret-file "$SECRET" --encrypt "$1" \
        --port-file "$DIR/sched.port" >"$DIR/sched-$1.out" 2>"$DIR/sched-$1.log" &
    CLUSTER="$CLUSTER $!"
    wait_file "$DIR/sched.port"
    i=2
    while [ $i -le $((NW + 1)) ]; do
        sh "$NETBED" exec "host$i" "$BIN/spillway-worker" --scheduler host1:7400 \
            --listen "host$i:0" --name "w$i" --slots 1 --store-capacity 512M --spill-dir none \
            --secret-file "$SECRET" --encrypt "$1" \
            --port-file "$DIR/w$i.port" >"$DIR/w$i-$1.out" 2>"$DIR/w$i-$1.log" &
        CLUSTER="$CLUSTER $!"
        i=$((i + 1))
    done
    PIDS="$PIDS $CLUSTER"
    i=2
    while [ $i -le $((NW + 1)) ]; do
        wait_file "$DIR/w$i.port"
        i=$((i + 1))
    done
}

# stop_cluster: SIGTERM to the cluster's daemons by pid, and wait for each.
stop_cluster() {
    for p in $CLUSTER; do kill "$p" 2>/dev/null || true; done
    for p in $CLUSTER; do wait "$p" 2>/dev/null || true; done
}

# client ENCRYPT ARGS...: spw-netbed-bench on host10 (SPW_ENCRYPT: its --encrypt).
client() {
    enc=$1
    shift
    SPW_SECRET_FILE="$SECRET" SPW_ENCRYPT="$enc" \
        sh "$NETBED" exec "host$((NW + 2))" "$BIN/spw-netbed-bench" host1:7400 "$@"
}

if [ "$CASES" = all ] || [ "$CASES" = encrypt ]; then
    start_cluster no
    if [ "$CASES" = all ]; then
        for k in 1 2 4; do
            client no broadcast "$k" "$BYTES" "$RATE" "$REPS"
        done
    fi
    client no broadcast "$NW" "$BYTES" "$RATE" "$REPS"
    client no transfer "$BYTES" "$RATE" "$REPS"
    [ "$CASES" = encrypt ] || client no tiny "$TINY" "$NW" "$NETBED_DELAY_MS"
    stop_cluster
    start_cluster required
    client required broadcast "$NW" "$BYTES" "$RATE" "$REPS"
    client required transfer "$BYTES" "$RATE" "$REPS"
    stop_cluster
fi
case $CASES in all | sort | plugin | drain) ;; *) exit 0 ;; esac

# plugin_first_task: a scheduler with the secret (uploads need one) on host1:7402, four workers.
plugin_hosts() {
    sh "$NETBED" exec host1 "$BIN/spillway-scheduler" --listen host1:7402 --http none \
        --secret-file "$SECRET" --port-file "$DIR/plug-sched.port" \
        >"$DIR/plug-sched.out" 2>"$DIR/plug-sched.log" &
    PIDS="$PIDS $!"
    wait_file "$DIR/plug-sched.port"
    for i in 2 3 4 5; do
        sh "$NETBED" exec "host$i" "$BIN/spillway-worker" --scheduler host1:7402 \
            --secret-file "$SECRET" --listen "host$i:0" --name "p$i" --slots 1 \
            --store-capacity 256M --spill-dir none --port-file "$DIR/p$i.port" \
            >"$DIR/p$i.out" 2>"$DIR/p$i.log" &
        PIDS="$PIDS $!"
    done
    for i in 2 3 4 5; do
        wait_file "$DIR/p$i.port"
    done
    sh "$NETBED" exec "host$((NW + 2))" "$BIN/spillway-bench" --scheduler host1:7402 \
        --secret-file "$SECRET" --repeat "${PLUGIN_REPS:-7}" \
        --case plugin_first_task
}
if [ "$CASES" = all ] || [ "$CASES" = plugin ]; then
    plugin_hosts
fi
[ "$CASES" != plugin ] || exit 0

# drain_worker I: worker dI on hostI of the drain cluster (host1:7403), spilling; pid in CLUSTER.
drain_worker() {
    mkdir -p "$DIR/dspill$1"
    sh "$NETBED" exec "host$1" "$BIN/spillway-worker" --scheduler host1:7403 \
        --listen "host$1:0" --name "d$1" --slots 1 --store-capacity "$DRAIN_CAPACITY" \
        --spill-dir "$DIR/dspill$1" --port-file "$DIR/d$1.port" \
        >"$DIR/d$1.out" 2>"$DIR/d$1.log" &
    CLUSTER="$CLUSTER $!"
    PIDS="$PIDS $!"
}

# drain_hosts: the client puts everything on d2 alone, says so in drain.ready, and drains d2
# once d3..d5 (started then) serve; the cluster is stopped after.
drain_hosts() {
    CLUSTER=""
    sh "$NETBED" exec host1 "$BIN/spillway-scheduler" --listen host1:7403 --http none \
        --port-file "$DIR/drain-sched.port" >"$DIR/drain-sched.out" 2>"$DIR/drain-sched.log" &
    CLUSTER="$CLUSTER $!"
    PIDS="$PIDS $!"
    wait_file "$DIR/drain-sched.port"
    drain_worker 2
    wait_file "$DIR/d2.port"
    sh "$NETBED" exec "host$((NW + 2))" "$BIN/spw-netbed-bench" host1:7403 drain \
        "$DRAIN_BYTES" "$DRAIN_PUT" "$RATE" d2 4 "$DIR/drain.ready" &
    client_pid=$!
    PIDS="$PIDS $client_pid"
    wait_file "$DIR/drain.ready" 6000
    for i in 3 4 5; do
        drain_worker "$i"
    done
    wait "$client_pid"
    stop_cluster
}
if [ "$CASES" = all ] || [ "$CASES" = drain ]; then
    drain_hosts
fi
[ "$CASES" != drain ] || exit 0

# sort_hosts: a scheduler on host1:7401 and four workers with the sort plugin, spilling.
sh "$NETBED" exec host1 "$BIN/spillway-scheduler" --listen host1:7401 --http none \
    --port-file "$DIR/sort-sched.port" >"$DIR/sort-sched.out" 2>"$DIR/sort-sched.log" &
PIDS="$PIDS $!"
wait_file "$DIR/sort-sched.port"
for i in 2 3 4 5; do
    mkdir -p "$DIR/spill$i"
    sh "$NETBED" exec "host$i" "$BIN/spillway-worker" --scheduler host1:7401 \
        --listen "host$i:0" --name "s$i" --slots 1 --store-capacity 256M \
        --spill-dir "$DIR/spill$i" --plugin "$SORT_PLUGIN" \
        --port-file "$DIR/s$i.port" >"$DIR/s$i.out" 2>"$DIR/s$i.log" &
    PIDS="$PIDS $!"
done
for i in 2 3 4 5; do
    wait_file "$DIR/s$i.port"
done
sh "$NETBED" exec "host$((NW + 2))" "$BIN/spw-netbed-bench" host1:7401 sort "$SORT_BYTES" 4 \
    "$RATE" "$SORT_PARTS" "$SORT_BLOCK"
