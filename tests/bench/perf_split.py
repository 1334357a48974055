#!/usr/bin/env python3
"""Where a machine's CPU went during the spill case's write, from a system-wide perf profile.

    perf record -a -g -F 1999 -o spill.perf -- build/bin/spillway-bench --case spill --spill-workers 1
    perf script -i spill.perf -F comm,tid,time,ip,sym,dso | tests/bench/perf_split.py

Each sample (every CPU, idle included) is put in one class by its process name and call stack:
`idle` (the kernel's idle task), then PROCESS:zstd (sampled in libzstd), :generate (the
bench's data generators), :map (mmap/munmap: an executor mapping its output), :pwrite (LMDB
writing the spill file), :xxhash, :other. The window is the first run of 0.25-s bins in which
the workers' zstd samples stay above half the busiest bin's (the compressible write's steady
state; --from/--to in seconds from the first sample pick another). Prints one JSON object:
the window, the samples in it, the CPUs' seconds and each class's share of them, largest first.
Figures, never assertions."""
import argparse
import collections
import json
import re
import sys

HEAD = re.compile(r"^(\S.*?)\s+(-?\d+)\s+(\d+\.\d+):")
BIN = 0.25


def read(f):
    samples, cur = [], None
    for line in f:
        if not line.strip():
            continue
        if not line[0].isspace():
            m = HEAD.match(line)
            if m is None:
                raise SystemExit(f"perf_split.py: not `perf script -F comm,tid,time,ip,sym,dso` "
                                 f"output: {line.strip()[:80]!r}")
            cur = (m.group(1).strip(), float(m.group(3)), [])
            samples.append(cur)
        elif cur is not None:
            cur[2].append(line.strip())
    if not samples:
        raise SystemExit("perf_split.py: no samples")
    return samples


def klass(comm, frames):
    if comm == "swapper" or comm.startswith("swapper/"):
        return "idle"
    stack = " ".join(frames)
    leaf = frames[0] if frames else ""
    if "libzstd" in leaf:
        what = "zstd"
    elif "fn_walk_f64" in stack or "fn_random" in stack or "spw_gen_" in stack:
        what = "generate"
    elif "munmap" in stack or "__mmap" in stack or "do_mmap" in stack:
        what = "map"
    elif "pwrite" in stack:
        what = "pwrite"
    elif "xxhash" in stack.lower() or "XXH" in stack:
        what = "xxhash"
    else:
        what = "other"
    return f"{comm}:{what}"


def window(samples, t0):
    bins = collections.Counter()
    for comm, t, frames in samples:
        if comm.startswith("spillway-worke") and frames and "libzstd" in frames[0]:
            bins[int((t - t0) / BIN)] += 1
    if not bins:
        raise SystemExit("perf_split.py: no zstd samples in a worker: give --from and --to")
    top = max(bins.values())
    first = min(k for k, v in bins.items() if v > top / 2)
    last = first
    while bins.get(last + 1, 0) > top / 2:
        last += 1
    return first * BIN, (last + 1) * BIN


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", nargs="?", help="perf script output (default: standard input)")
    ap.add_argument("--from", dest="lo", type=float, help="window start, s after the first sample")
    ap.add_argument("--to", dest="hi", type=float, help="window end, s after the first sample")
    ap.add_argument("--hz", type=float, default=1999, help="perf record's -F (default 1999)")
    a = ap.parse_args()
    with (open(a.file) if a.file else sys.stdin) as f:
        samples = read(f)
    t0 = samples[0][1]
    lo, hi = (a.lo, a.hi) if a.lo is not None and a.hi is not None else window(samples, t0)
    counts = collections.Counter(klass(c, fr) for c, t, fr in samples if lo <= t - t0 < hi)
    n = sum(counts.values())
    if n == 0:
        raise SystemExit(f"perf_split.py: no samples between {lo} and {hi} s")
    print(json.dumps({
        "window_s": [round(lo, 3), round(hi, 3)],
        "samples": n,
        "cpu_s": round(n / a.hz, 3),
        "share": {k: round(v / n, 4) for k, v in counts.most_common()},
    }))


if __name__ == "__main__":
    main()
