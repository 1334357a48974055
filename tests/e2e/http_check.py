#!/usr/bin/env python3
"""Helper of test_e2e_observe: talks to the scheduler's HTTP endpoint and prints JSON for the C test.

  http_check.py get URL [TOKEN]          the body; exit 1 with the status on anything but 200
  http_check.py status URL [TOKEN]       just the HTTP status code
  http_check.py metrics URL              /metrics parsed by prometheus_client's own text parser:
                                         {"family": {"type": T, "samples": [[name, labels, value]]}}
  http_check.py dashboard URL OUTDIR     loads the page in headless Chromium (its JS runs for a
                                         few seconds of virtual time), saves OUTDIR/dashboard.png
                                         and OUTDIR/dashboard.html, prints what the DOM shows
"""
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from html.parser import HTMLParser


def fetch(url, token=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def cmd_get(url, token=None):
    code, body = fetch(url, token)
    if code != 200:
        print(f"HTTP {code}: {body}", file=sys.stderr)
        return 1
    sys.stdout.write(body)
    return 0


def cmd_status(url, token=None):
    print(fetch(url, token)[0])
    return 0


def cmd_metrics(url):
    from prometheus_client.parser import text_string_to_metric_families
    code, body = fetch(url)
    if code != 200:
        print(f"HTTP {code}: {body}", file=sys.stderr)
        return 1
    out = {}
    for fam in text_string_to_metric_families(body):
        out[fam.name] = {"type": fam.type,
                         "samples": [[s.name, s.labels, s.value] for s in fam.samples]}
    json.dump(out, sys.stdout)
    return 0


class Dom(HTMLParser):
    """Collects the attributes of the elements the dashboard marks for scripts."""

    def __init__(self):
        super().__init__()
        self.workers, self.graphs, self.objects, self.canvases = [], [], 0, 0
        self.refreshes, self.error, self._in_error = 0, "", False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "body":
            self.refreshes = int(a.get("data-refreshes", "0"))
        if "worker" in cls:
            self.workers.append({k[5:]: v for k, v in a.items() if k.startswith("data-")})
        if "graph" in cls:
            self.graphs.append({k[5:]: v for k, v in a.items() if k.startswith("data-")})
        if "object" in cls:
            self.objects += 1
        if tag == "canvas":
            self.canvases += 1
        self._in_error = a.get("id") == "error"

    def handle_endtag(self, tag):
        self._in_error = False

    def handle_data(self, data):
        if self._in_error:
            self.error += data


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def cmd_dashboard(url, outdir):
    exe = chromium()
    if exe is None:
        print("no chromium", file=sys.stderr)
        return 77
    # Chromium's headless mode runs the page's timers in virtual time: 6 s is six refreshes
    # of the page without six seconds of waiting. --no-sandbox: CI runs as root.
    common = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--hide-scrollbars", "--virtual-time-budget=6000",
              "--user-data-dir=" + os.path.join(outdir, "chromium-profile")]
    env = dict(os.environ, HOME=outdir)
    dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True,
                         timeout=120, env=env)
    if dom.returncode != 0:
        print(dom.stderr, file=sys.stderr)
        return 1
    with open(os.path.join(outdir, "dashboard.html"), "w") as f:
        f.write(dom.stdout)
    png = os.path.join(outdir, "dashboard.png")
    shot = subprocess.run(common + ["--window-size=1280,1300", "--screenshot=" + png, url],
                          capture_output=True, text=True, timeout=120, env=env)
    if shot.returncode != 0 or not os.path.exists(png):
        print(shot.stderr, file=sys.stderr)
        return 1
    shutil.rmtree(os.path.join(outdir, "chromium-profile"), ignore_errors=True)
    p = Dom()
    p.feed(dom.stdout)
    json.dump({"workers": p.workers, "graphs": p.graphs, "objects": p.objects,
               "canvases": p.canvases, "refreshes": p.refreshes, "error": p.error.strip(),
               "screenshot": png, "screenshot_bytes": os.path.getsize(png)}, sys.stdout)
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "get":
        return cmd_get(argv[2], argv[3] if len(argv) > 3 else None)
    if len(argv) >= 3 and argv[1] == "status":
        return cmd_status(argv[2], argv[3] if len(argv) > 3 else None)
    if len(argv) == 3 and argv[1] == "metrics":
        return cmd_metrics(argv[2])
    if len(argv) == 4 and argv[1] == "dashboard":
        return cmd_dashboard(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
