#!/usr/bin/env bash
# CHECK latency while THROTTLED is abused (docs/BENCHMARKS.md, "Under abuse"):
#   RUNS=3 BIN=/path/to/build bench/throttled_load.sh
# Runs the admin_load case of tests/integration/check_throttled.c (this tree's build) against
# the rl-node and rl-router of BIN (this tree's build by default; an older revision's build
# measures "before"): two nodes and a router, 400 open episodes of 200-byte users, 16
# connections each keeping 4 THROTTLED top=100 (~34 KB replies) in flight, and one client
# sending CHECKS (3,000 by default, RL_LOAD_CHECKS of the test) CHECKs one at a time (router
# deadline DEADLINE, 50ms by default as in the table of docs/BENCHMARKS.md; the test's own is
# a generous 20 s). Prints the CHECKs answered, their p50/p99/max in ms, the FAIL_OPEN answers,
# the THROTTLED replies, the seconds the CHECKs took and CHECKs a second of each round, then
# the medians. The test itself asserts none of these figures (they are the machine's); it
# asserts that every CHECK is answered by its node and that the nodes bound THROTTLED
# (full replies up to a burst, then OVERLOADED).
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
checks=${CHECKS:-3000}
deadline=${DEADLINE:-50ms}
target=${BIN:-$bin}
suite=$bin/check_throttled
[ -x "$suite" ] || { echo "build $suite first" >&2; exit 1; }
machine
echo "binaries: $target"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq 1 "$runs"); do
    # the case may fail when a 50 ms deadline answered FAIL_OPEN, or against an older build
    # (this tree's assertions): its figures are printed first, which is all this takes
    { CK_RUN_CASE=admin_load RL_LOAD_CHECKS=$checks RL_LOAD_DEADLINE=$deadline RL_BIN_DIR=$target \
        timeout 300 "$suite" 2>&1 || true; } |
        sed -n 's/^throttled load: \([0-9]*\) CHECKs, p50 \([0-9.]*\) ms, p99 \([0-9.]*\) ms, max \([0-9.]*\) ms, \([0-9]*\) FAIL_OPEN; \([0-9]*\) THROTTLED answered (\([0-9]*\) of 100 episodes.*; \([0-9.]*\) s$/RESULT checks=\1 p50_ms=\2 p99_ms=\3 max_ms=\4 fail_open=\5 throttled=\6 full=\7 secs=\8/p' |
        awk '{ split($9, a, "="); split($2, c, "="); printf "%s checks_per_s=%.0f\n", $0, c[2] / a[2] }'
done | tee "$out"
python3 -c '
import statistics, sys
cols = {}
for line in sys.stdin:
    for kv in line.split()[1:]:
        k, _, v = kv.partition("=")
        cols.setdefault(k, []).append(float(v))
print("medians:", " ".join("%s=%g" % (k, statistics.median(v)) for k, v in cols.items()))
' <"$out"
