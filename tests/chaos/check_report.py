#!/usr/bin/env python3
"""check_chaos_report: the page of a real chaos run, opened in headless Chromium.

Runs `rl-chaos run SCENARIO --report DIR` on a short scenario with one fault (ZooKeeper, two
nodes and a router, as rl-chaos starts them; node b paused for 1.5 s), then checks:
  - the page is one file that fetches nothing (no src, href, link, import, url(), fetch);
  - opened in headless Chromium (--dump-dom, after its script ran), it drew the timeline:
    one shaded fault rectangle labelled "pause node b for 1500ms" whose interval is the
    step's (it began at 2 s or later and ended at 3.5 s or later: the run's clock decides
    both bounds, never earlier), its label above, the answer series drawn with the same
    totals as the verdict's figures (allowed, limited, fail_open, fail_closed), policy
    answers in the fault's interval, the backstop's answers (service `api` fails open; the
    router's request log tells them apart) drawn in their own series within the fault and
    equal to the router's STATS backstop counters (its log's count equal to them; the
    series plus the answers counted as unmatched equal to them), latency p50/p99 drawn,
    and the verdict's invariants beside it as verdict.json has them;
  - a second run, node b killed (kill -9) under two routers: both routers' request logs
    read, the backstop's answers (owner down now, not a deadline) drawn in their own series
    within the kill and equal to the two routers' STATS counters, the limited and
    fail_open series plus them equal to the verdict's figures;
  - a --report path that cannot be a directory is refused before any cluster starts (2),
    and --help documents --report.
Not a check of how fast anything was: the bounds come from the scenario's schedule.
Usage (ctest runs it): check_report.py BUILD_DIR. Exit 77 (skipped) only when no Chromium
is installed (scripts/deps.sh installs Debian's `chromium`). REPORT_SCREENSHOT=FILE.png
also saves a screenshot of the page; RL_KEEP_TMP=1 keeps the run's directory.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SCENARIO = """; written by check_report.py
[scenario]
name = report-pause
description = node b paused (SIGSTOP) for 1.5 s, under the session timeout
duration = 6s

[cluster]
nodes = 2
routers = 1
shards = 64
session_timeout = 3s
deadline = 200ms

[traffic]
rate = 300
users = 50

[service api]
limit = fixed_window 10 per 1s
failure = open

[service pay]
limit = fixed_window 20 per 5s
failure = closed

[steps]
at 2s pause node b for 1500ms

[expect]
min_policy_answers = 1
"""
# The second run: a node killed under two routers, its `failure = open` users answered by
# both routers' backstops (owner down, not a deadline) until ZooKeeper moves its shards.
KILL_SCENARIO = """; written by check_report.py
[scenario]
name = report-kill
description = kill -9 of node b under two routers
duration = 5s

[cluster]
nodes = 2
routers = 2
shards = 64
session_timeout = 2s
deadline = 200ms

[traffic]
rate = 300
users = 50

[service api]
limit = fixed_window 10 per 1s
failure = open

[steps]
at 1500ms kill node b
"""
FAULT = "pause node b for 1500ms"
FAULT_FROM_MS, FAULT_TO_MS = 2000, 3500
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def fail(msg):
    print("check_report: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def browse(browser, tmp, what, url):
    """Runs headless Chromium with a fresh profile; returns what it printed."""
    profile = tempfile.mkdtemp(prefix="profile-", dir=tmp)
    out = subprocess.run([browser] + CHROMIUM_FLAGS + ["--user-data-dir=" + profile] + what +
                         [url], capture_output=True, text=True, timeout=180)
    check(out.returncode == 0, "chromium exited %d: %s" % (out.returncode, out.stderr[-2000:]))
    return out.stdout


def embedded(page, ident):
    m = re.search(r'<script type="application/json" id="%s">(.*?)</script>' % ident, page, re.S)
    check(m is not None, "the page has no %s" % ident)
    return json.loads(m.group(1))


def main():
    if len(sys.argv) != 2:
        print("usage: check_report.py BUILD_DIR", file=sys.stderr)
        return 2
    chaos = os.path.join(os.path.abspath(sys.argv[1]), "rl-chaos")
    browser = chromium()
    if browser is None:
        print("check_report: SKIP: no chromium installed (scripts/deps.sh installs Debian's "
              "chromium package)")
        return 77
    tmp = tempfile.mkdtemp(prefix="rl-report-")
    try:
        run(chaos, browser, tmp)
        run_kill(chaos, browser, tmp)
    finally:
        if os.environ.get("RL_KEEP_TMP") == "1":
            print("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("check_report: OK")
    return 0


def run(chaos, browser, tmp):
    # refused before anything starts: a path under a file cannot be a directory
    ini = os.path.join(tmp, "report-pause.ini")
    with open(ini, "w") as f:
        f.write(SCENARIO)
    blocker = os.path.join(tmp, "file")
    open(blocker, "w").close()
    out = subprocess.run([chaos, "run", ini, "--report", os.path.join(blocker, "dir")],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 2 and "--report" in out.stderr,
          "a bad --report: exit %d, %r" % (out.returncode, out.stderr))
    out = subprocess.run([chaos, "--help"], capture_output=True, text=True, timeout=60)
    check("--report DIR" in out.stdout, "--help does not document --report")

    # the real run
    report = os.path.join(tmp, "report", "run1")
    out = subprocess.run([chaos, "run", ini, "--report", report], capture_output=True,
                         text=True, timeout=240)
    # a verdict either way (1: an invariant failed on a starved machine); the page is
    # written for both
    check(out.returncode in (0, 1), "rl-chaos exited %d:\n%s%s" % (out.returncode, out.stdout,
                                                                   out.stderr))
    index = os.path.join(report, "index.html")
    check(os.path.isfile(index), "no %s:\n%s" % (index, out.stdout))
    with open(os.path.join(report, "verdict.json")) as f:
        verdict = json.load(f)
    with open(index) as f:
        page = f.read()
    check("report: " + index in out.stdout, "rl-chaos did not name the page")

    # one file, nothing fetched
    for pattern in (r"\bsrc\s*=", r"\bhref\s*=", r"<link\b", r"@import", r"url\(", r"\bfetch\(",
                    r"XMLHttpRequest", r"<iframe", r"<img"):
        check(re.search(pattern, page, re.I) is None, "the page would fetch: %s" % pattern)
    for url in re.findall(r"https?://[^\s'\"<>]+", page):
        check(url == "http://www.w3.org/2000/svg", "the page names a URL: %s" % url)
    timeline = embedded(page, "timeline-data")
    check(embedded(page, "verdict-data") == verdict, "the page's verdict is not verdict.json")

    # drawn, in a browser
    dom = browse(browser, tmp, ["--dump-dom"], "file://" + index)
    m = re.search(r'<pre id="report-summary"[^>]*>(.*?)</pre>', dom, re.S)
    check(m is not None and m.group(1).strip() != "", "the page's script did not run:\n" +
          dom[:3000])
    summary = json.loads(html.unescape(m.group(1)))
    check(summary["rendered"] is True, "not rendered: %s" % summary)

    # the fault: one rectangle, its interval the step's, its label above it
    faults = summary["faults"]
    check(len(faults) == 1, "faults drawn: %s" % faults)
    f = faults[0]
    check(f["label"] == FAULT and f["kind"] == "pause", "fault: %s" % f)
    check(FAULT_FROM_MS <= f["from_ms"] < f["to_ms"] and f["to_ms"] >= FAULT_TO_MS,
          "the fault's interval is not the step's: %s" % f)
    plot = summary["plot"]
    want_x = plot["x0"] + plot["width"] * f["from_ms"] / plot["t_end_ms"]
    want_w = plot["width"] * (f["to_ms"] - f["from_ms"]) / plot["t_end_ms"]
    check(abs(f["x"] - want_x) < 1 and abs(f["width"] - want_w) < 1,
          "the rectangle is not where its interval is: %s, want x %.1f width %.1f" %
          (f, want_x, want_w))
    check(any(t.startswith(FAULT) for t in summary["fault_labels"]),
          "no label for the fault: %s" % summary["fault_labels"])
    check(re.search(r'<rect class="fault"[^>]*data-label="%s"' % re.escape(FAULT), dom),
          "no shaded rectangle in the DOM")
    check(re.search(r'<text class="fault-label"[^>]*>%s' % re.escape(FAULT), dom),
          "no label text in the DOM")

    # the series: drawn, with the verdict's totals (a backstop answer counted in its own
    # series, no longer in the limited or fail_open one it came as)
    series, figures = summary["series"], verdict["figures"]
    moved = {"limited": "backstop_limited", "fail_open": "backstop_allowed"}
    for name in ("allowed", "limited", "fail_open", "fail_closed"):
        shown = series[name]["total"] + (series[moved[name]]["total"] if name in moved else 0)
        check(shown == figures[name], "%s: the page shows %d, the verdict counted %d" %
              (name, shown, figures[name]))
        check(sum(timeline["series"][name]) == series[name]["total"],
              "%s: the data's total" % name)
    check(series["allowed"]["points"] > 0 and '<path class="series allowed"' in dom,
          "allowed not drawn")
    policy = [sum(v) for v in zip(timeline["series"]["fail_open"],
                                   timeline["series"]["fail_closed"],
                                   timeline["series"]["backstop_allowed"],
                                   timeline["series"]["backstop_limited"])]
    check(sum(policy) > 0 and (series["fail_open"]["points"] > 0 or
                               series["fail_closed"]["points"] > 0),
          "no policy answers drawn, though node b was paused")
    b = timeline["bucket_ms"]
    check(any(v > 0 and f["from_ms"] <= i * b <= f["to_ms"] for i, v in enumerate(policy)),
          "no policy answer within the pause %s: %s" % (f, policy))
    check(summary["latency"]["p50"]["points"] > 0 and summary["latency"]["p99"]["points"] > 0,
          "latency not drawn: %s" % summary["latency"])
    check('<path class="latency p99"' in dom, "no p99 path in the DOM")

    # the verdict beside it
    want = [{"name": i["name"], "held": i["held"]} for i in verdict["invariants"]]
    check(summary["verdict"] == {"pass": verdict["pass"], "invariants": want},
          "verdict shown: %s, verdict.json: %s" % (summary["verdict"], want))
    for inv in verdict["invariants"]:
        check(re.search(r'<tr class="%s" data-invariant="%s">' %
                        ("held" if inv["held"] else "violated", re.escape(inv["name"])), dom),
              "no row for %s" % inv["name"])

    check_backstop(timeline, summary, figures, dom, f, routers=1)

    shot = os.environ.get("REPORT_SCREENSHOT")
    if shot:
        browse(browser, tmp, ["--screenshot=" + os.path.abspath(shot), "--window-size=1400,900"],
               "file://" + index)
        print("check_report: screenshot " + shot)
    print("check_report: %s, fault %s %d-%d ms, %d buckets, answers %d" %
          ("PASS" if verdict["pass"] else "FAIL (still drawn)", f["label"], f["from_ms"],
           f["to_ms"], summary["nbuckets"], figures["answered"]))


def check_backstop(timeline, summary, figures, dom, f, routers):
    """The backstop's answers told apart on the page, as the routers counted them."""
    series = summary["series"]
    # `api` fails open, so while node b cannot be reached (paused past the deadline, or
    # killed) the routers' backstop answers its users; the page tells those answers apart
    # by the routers' request logs, and what it shows is what the routers counted (STATS),
    # each answer either drawn or counted as unmatched (the client never got it)
    bs = timeline["backstop"]
    b = timeline["bucket_ms"]
    check(bs["logs_read"] == routers, "request logs read: %s" % bs)
    for kind in ("allowed", "limited"):
        name = "backstop_" + kind
        check("not told apart" not in series[name]["label"] and kind in series[name]["label"],
              "%s label: %s" % (name, series[name]))
        check(bs["logged_" + kind] == figures[name],
              "%s: the log has %d, the router's STATS %d" % (name, bs["logged_" + kind],
                                                              figures[name]))
        check(sum(timeline["series"][name]) == series[name]["total"],
              "%s: the data's total" % name)
    drawn_bs = series["backstop_allowed"]["total"] + series["backstop_limited"]["total"]
    stats_bs = figures["backstop_allowed"] + figures["backstop_limited"]
    check(stats_bs > 0, "the routers' backstop never answered, though node b was cut off: %s" %
          figures)
    check(drawn_bs > 0 and drawn_bs + bs["unmatched"] == stats_bs,
          "backstop: the page shows %d (+%d unmatched), the router counted %d" %
          (drawn_bs, bs["unmatched"], stats_bs))
    check(series["backstop_allowed"]["points"] + series["backstop_limited"]["points"] > 0 and
          '<path class="series backstop_' in dom, "backstop not drawn")
    backstop = [x + y for x, y in zip(timeline["series"]["backstop_allowed"],
                                       timeline["series"]["backstop_limited"])]
    check(any(v > 0 and f["from_ms"] <= i * b <= f["to_ms"] for i, v in enumerate(backstop)),
          "no backstop answer within the fault %s: %s" % (f, backstop))


def run_kill(chaos, browser, tmp):
    """A node killed under two routers: both routers' logs read, the backstop drawn."""
    ini = os.path.join(tmp, "report-kill.ini")
    with open(ini, "w") as f:
        f.write(KILL_SCENARIO)
    report = os.path.join(tmp, "report", "run2")
    out = subprocess.run([chaos, "run", ini, "--report", report], capture_output=True,
                         text=True, timeout=240)
    check(out.returncode in (0, 1), "rl-chaos exited %d:\n%s%s" % (out.returncode, out.stdout,
                                                                   out.stderr))
    index = os.path.join(report, "index.html")
    with open(os.path.join(report, "verdict.json")) as f:
        verdict = json.load(f)
    with open(index) as f:
        timeline = embedded(f.read(), "timeline-data")
    dom = browse(browser, tmp, ["--dump-dom"], "file://" + index)
    m = re.search(r'<pre id="report-summary"[^>]*>(.*?)</pre>', dom, re.S)
    check(m is not None and m.group(1).strip() != "", "the page's script did not run")
    summary = json.loads(html.unescape(m.group(1)))
    kills = [x for x in summary["faults"] if x["kind"] == "kill"]
    check(len(kills) == 1, "faults drawn: %s" % summary["faults"])
    series, figures = summary["series"], verdict["figures"]
    for name, bsname in (("limited", "backstop_limited"), ("fail_open", "backstop_allowed")):
        check(series[name]["total"] + series[bsname]["total"] == figures[name],
              "%s: the page shows %d + %d, the verdict counted %d" %
              (name, series[name]["total"], series[bsname]["total"], figures[name]))
    check_backstop(timeline, summary, figures, dom, kills[0], routers=2)
    print("check_report: kill run %s, backstop %s" %
          ("PASS" if verdict["pass"] else "FAIL (still drawn)", timeline["backstop"]))


if __name__ == "__main__":
    sys.exit(main())
