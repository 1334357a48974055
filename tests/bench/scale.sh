#!/bin/sh
# Runs the scale cases of spillway-bench (scale_tiny and chain_latency) on clusters of 2, 4, 8
# and 14 workers of one slot each, capped at this machine's cores, and prints one JSON line per
# point (each line carries "workers", "slots" and "cpus"). Figures, never assertions.
# On a machine with more than one CPU each chain_latency point runs once more on one CPU
# (--cpus 1, "cpus": 1): the hop's own work, without the cross-CPU wake-ups whose cost is the
# machine's (a VM wakes an idle vCPU through the host), so that flatness in the number of
# workers can be read on a noisy machine too.
#
#   tests/bench/scale.sh BIN_DIR [extra spillway-bench options, e.g. --n 20000]
#
# SPW_SCALE_WORKERS="2 4" picks other worker counts (still capped at the cores).
set -eu
if [ $# -lt 1 ] || [ ! -x "$1/spillway-bench" ]; then
    echo "usage: $0 BIN_DIR [spillway-bench options]   (BIN_DIR holds spillway-bench)" >&2
    exit 2
fi
bin=$1
shift
cores=$(nproc)
ran=0
for w in ${SPW_SCALE_WORKERS:-2 4 8 14}; do
    if [ "$w" -gt "$cores" ] && [ "$ran" -gt 0 ]; then
        echo "scale.sh: $w workers skipped: $cores CPUs available here" >&2
        continue
    fi
    "$bin/spillway-bench" --workers "$w" --slots 1 --case scale_tiny,chain_latency "$@"
    if [ "$cores" -gt 1 ]; then
        "$bin/spillway-bench" --workers "$w" --slots 1 --cpus 1 --case chain_latency "$@"
    fi
    ran=$((ran + 1))
done
