#!/usr/bin/env python3
"""Smoke test of the scale cases: tests/bench/scale.sh with tiny graphs prints one valid JSON
line per case and point, with the documented fields; bad options are refused. No timings are
asserted (performance is the bench's business, not the tests')."""
import json
import os
import subprocess
import sys

src, bindir = sys.argv[1], sys.argv[2]
env = dict(os.environ, SPW_SCALE_WORKERS="1 2")
out = subprocess.run([os.path.join(src, "tests/bench/scale.sh"), bindir, "--quick", "--n", "300,50"],
                     env=env, capture_output=True, text=True, timeout=240)
sys.stderr.write(out.stderr)
assert out.returncode == 0, f"scale.sh exited {out.returncode}"
lines = [json.loads(l) for l in out.stdout.splitlines()]
points = [(d["case"], d["workers"], d["n"], d["cpus"]) for d in lines]
cpus = len(os.sched_getaffinity(0))
# scale.sh counts nproc: the CPUs this process may use, as sched_getaffinity
pinned = [("chain_latency", 200, 1)] if cpus > 1 else []
want = [(c, w, n, k) for w in (1, 2)
        for c, n, k in [("scale_tiny", 300, cpus), ("scale_tiny", 50, cpus),
                        ("chain_latency", 200, cpus)] + pinned]
assert points == want, f"points {points}, expected {want}"
for d in lines:
    assert d["slots"] == 1, d
    assert d["seconds"] > 0 and d["tasks_per_s"] > 0, d
    if d["case"] == "scale_tiny":
        for k in ("sched_peak_rss_mib", "sched_bytes_per_task", "sched_idle_rss_mib"):
            assert isinstance(d[k], (int, float)), (k, d)
        assert d["sched_peak_rss_mib"] > 0 and d["sched_idle_rss_mib"] > 0, d
        assert d["extra"]["results_fetched"] == d["n"], d
        assert d["extra"]["sched_idle_settled"] is True, d
        per = "task"
    else:
        assert d["us_per_hop"] > 0 and d["extra"]["verified"] is True, d
        e = d["extra"]
        runs = e["us_per_hop_runs"]
        assert e["repeat"] == 3 and len(runs) == 3, d  # --quick: three runs of the chain
        assert e["us_per_hop_min"] == min(runs) and e["us_per_hop_max"] == max(runs), d
        assert sorted(runs)[1] == d["us_per_hop"], d  # the median
        per = "hop"
    # The scheduler's loop-thread figures; the hardware counters are null, with the reason,
    # where the machine has none (a VM without a PMU).
    e = d["extra"]
    for k in (f"sched_cpu_us_per_{per}", f"sched_loop_cpu_us_per_{per}"):
        assert isinstance(e[k], (int, float)) and e[k] >= 0, (k, d)
    assert e[f"sched_loop_ceiling_{per}s_per_s"] is None or e[f"sched_loop_ceiling_{per}s_per_s"] > 0, d
    counted = e["sched_counters"]
    assert counted in ("user+kernel", "user", None), d
    assert (e["sched_counters_why"] is None) == (counted is not None), d
    for k in (f"sched_instructions_per_{per}", f"sched_cycles_per_{per}", "sched_ipc"):
        assert (e[k] is None) if counted is None else e[k] > 0, (k, d)
bench = os.path.join(bindir, "spillway-bench")
for bad, what in ((["--workers", "0"], "--workers"), (["--slots", "x"], "--slots"),
                  (["--n", "5,,x"], "--n"), (["--repeat", "0"], "--repeat"),
                  (["--workers", "2", "--scheduler", "127.0.0.1:1"], "--scheduler"),
                  (["--cpus", "0"], "--cpus"), (["--cpus", str(cpus + 1)], "--cpus"),
                  (["--cpus", "1", "--scheduler", "127.0.0.1:1"], "--scheduler")):
    r = subprocess.run([bench, *bad, "--case", "scale_tiny"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and what in r.stderr and r.stdout == "", (bad, r.returncode, r.stderr)
print(f"ok: {len(lines)} lines")
