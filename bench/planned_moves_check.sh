#!/usr/bin/env bash
# Issue 32's check, figures printed (docs/BENCHMARKS.md, "Planned moves", "Counters across
# planned moves"): ZooKeeper, three nodes, two routers, 600 users of three services
# (token_bucket, fixed_window, gcra; 20 per 1d) each brought to their limit (1,800 exhausted
# pairs), a client asking for them through both routers all along, then a rolling restart
# (SIGTERM, waited for, started again, node after node), a fourth node joining and an
# rl-rebalance of a skewed log. Per step: the pairs with a fresh allowance after it, the
# answers that were not LIMITED during it, the policy answers, the slowest batch of 100
# pipelined CHECKs, the exit statuses. The run itself is clients/python/tests/moves_check.py
# (also the pytest test_planned_moves.py, which asserts the figures); this prints them with the
# machine, load and commit. Not a speed benchmark: the figures are counts.
#   bench/planned_moves_check.sh                 RUNS runs (default 3)
#   STOP_SIGNAL=KILL bench/planned_moves_check.sh   the rolling step with kill -9 (losses, not
#                                                   moves: the counters restart from zero)
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
for t in rl-node rl-router rl-rebalance rl-genlog; do
    [ -x "$bin/$t" ] || cmake --build "$bin" -j2 --target rl-node rl-router rl-rebalance rl-genlog >/dev/null
done
machine
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(tree_rev)"
echo "command: RUNS=$runs${STOP_SIGNAL:+ STOP_SIGNAL=$STOP_SIGNAL} bench/planned_moves_check.sh"
status=0
for i in $(seq 1 "$runs"); do
    echo "run $i:"
    RL_BUILD_DIR=$bin "$py" "$top/clients/python/tests/moves_check.py" --json | sed 's/^/  /' ||
        { echo "run $i failed" >&2; status=1; }
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
