#!/usr/bin/env python3
"""perf_split.py on a made-up `perf script` dump: the window is found where the workers' zstd
samples are dense, each sample lands in its class, and bad input is refused."""
import json
import subprocess
import sys

tool = sys.argv[1]


def sample(comm, t, *frames):
    return f"{comm}  101   {t:.6f}: \n" + "".join(f"\t{i:x} {f}\n" for i, f in enumerate(frames)) + "\n"


ZSTD = "[unknown] (/usr/lib/x86_64-linux-gnu/libzstd.so.1.5.4)"
dump = [sample("spillway-bench", 0.0, "main (/b/spillway-bench)")]
for k in range(40):  # 0.0-1.0 s: little zstd; 1.0-2.0 s: the steady write; then little again
    t = 1.0 + k * 0.025
    dump.append(sample("spillway-worker", t, ZSTD))
    dump.append(sample("spillway-worker", t + 0.001, ZSTD))
    if k % 4 == 0:
        dump.append(sample("spillway-worker", t + 0.002, "fn_walk_f64 (/b/spillway-worker)"))
    if k % 8 == 0:
        dump.append(sample("spillway-worker", t + 0.003, "unmap_page_range ([kernel.kallsyms])",
                           "__munmap (/usr/lib/x86_64-linux-gnu/libc.so.6)"))
        dump.append(sample("spillway-worker", t + 0.004,
                           "copy_folio_from_iter_atomic ([kernel.kallsyms])",
                           "__x64_sys_pwrite64 ([kernel.kallsyms])"))
        dump.append(sample("swapper", t + 0.005, "pv_native_safe_halt ([kernel.kallsyms])"))
dump.append(sample("spillway-worker", 0.5, ZSTD))
dump.append(sample("spillway-worker", 2.6, ZSTD))
text = "".join(dump)

r = subprocess.run([sys.executable, tool], input=text, capture_output=True, text=True)
assert r.returncode == 0, r.stderr
d = json.loads(r.stdout)
assert d["window_s"] == [1.0, 2.0], d
n = 80 + 10 + 5 * 3
assert d["samples"] == n, d
want = {"spillway-worker:zstd": 80, "spillway-worker:generate": 10, "spillway-worker:map": 5,
        "spillway-worker:pwrite": 5, "idle": 5}
assert d["share"] == {k: round(v / n, 4) for k, v in want.items()}, d
assert list(d["share"])[0] == "spillway-worker:zstd", d  # largest first

r = subprocess.run([sys.executable, tool, "--from", "0", "--to", "0.75"], input=text,
                   capture_output=True, text=True)
assert r.returncode == 0 and json.loads(r.stdout)["samples"] == 2, (r.stdout, r.stderr)

for bad in ("not perf output\n", ""):
    r = subprocess.run([sys.executable, tool], input=bad, capture_output=True, text=True)
    assert r.returncode != 0 and "perf_split.py:" in r.stderr, (bad, r.returncode, r.stderr)
print("ok")
