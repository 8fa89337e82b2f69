#!/usr/bin/env bash
# How long a process's event loop stalls while a large rules file is put in force and while
# its /metrics page is pulled back to back (docs/BENCHMARKS.md, "Large rule sets"):
#   RUNS=3 BIN=/path/to/build bench/loop_stalls.sh
# Runs the `static` and `scrape` cases of tests/integration/check_rules_live.c (this tree's
# build) against the rl-node and rl-router of BIN (this tree's build by default; an older
# revision's build measures "before"), RUNS rounds, and prints each round's figures, then
# their medians:
#   - `sighup N process`: the slowest PING the process answered (a client PINGs it 2 ms
#     apart) while a SIGHUP put N services (20,000, then twice 60,000) in force;
#   - `scrape process`: four threads pulling /metrics at 20,000 services for 3 s: the loop's
#     time per page (rl_metrics_render_loop_seconds, the median of the pages), its share of
#     the page's cost, and the slowest PING meanwhile.
# These are figures of the machine: the test asserts none of them (it asserts that the loop
# answered while the parse ran, and that the loop carries a small share of a page's cost).
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
target=${BIN:-$bin}
suite=$bin/check_rules_live
[ -x "$suite" ] || { echo "build $suite first" >&2; exit 1; }
machine
echo "binaries: $target"
echo "load: $(uptime)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq 1 "$runs"); do
    for case in static scrape; do
        # an older build may fail the case: its figures are printed first
        { CK_RUN_CASE=$case RL_BIN_DIR=$target timeout 600 "$suite" 2>&1 || true; } |
            sed -n -e 's/^\([0-9]*\) services by SIGHUP: \(rl-[a-z]*\).s slowest PING \([0-9]*\) ms.*/RESULT sighup_\1_\2 ping_ms=\3/p' \
                -e 's/^scrape storm, [0-9]* services: \(rl-[a-z]*\) served \([0-9]*\) pages.*per page \([0-9.]*\) ms (median.*), \([0-9.]*\) of the page.s cost.*slowest PING \([0-9]*\) ms.*/RESULT scrape_\1 pages=\2 loop_ms=\3 loop_share=\4 ping_ms=\5/p'
    done
done | tee "$out"
python3 -c '
import statistics, sys
cols = {}
for line in sys.stdin:
    f = line.split()
    for kv in f[2:]:
        k, _, v = kv.partition("=")
        cols.setdefault((f[1], k), []).append(float(v))
for (what, k), v in cols.items():
    print("median %s %s=%g (%d values, %g-%g)" % (what, k, statistics.median(v), len(v), min(v), max(v)))
' <"$out"
