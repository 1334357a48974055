#!/bin/sh
# Runs the scale cases of spillway-bench (scale_tiny and chain_latency) on clusters of 2, 4, 8
# and 14 workers of one slot each, capped at this machine's cores, and prints one JSON line per
# point (each line carries "workers" and "slots"). Figures, never assertions.
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
        echo "scale.sh: $w workers skipped: this machine has $cores cores" >&2
        continue
    fi
    "$bin/spillway-bench" --workers "$w" --slots 1 --case scale_tiny,chain_latency "$@"
    ran=$((ran + 1))
done
