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
points = [(d["case"], d["workers"], d["n"]) for d in lines]
want = [(c, w, n) for w in (1, 2)
        for c, n in (("scale_tiny", 300), ("scale_tiny", 50), ("chain_latency", 200))]
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
    else:
        assert d["us_per_hop"] > 0 and d["extra"]["verified"] is True, d
bench = os.path.join(bindir, "spillway-bench")
for bad, what in ((["--workers", "0"], "--workers"), (["--slots", "x"], "--slots"),
                  (["--n", "5,,x"], "--n"), (["--workers", "2", "--scheduler", "127.0.0.1:1"], "--scheduler")):
    r = subprocess.run([bench, *bad, "--case", "scale_tiny"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and what in r.stderr and r.stdout == "", (bad, r.returncode, r.stderr)
print(f"ok: {len(lines)} lines")
