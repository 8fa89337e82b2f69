#!/usr/bin/env bash
# The figures of docs/CHAOS.md: every shipped scenario RUNS times (3 by default), longer
# than the CI suite runs them unless told otherwise, and one table of medians per scenario:
# how long until the shards moved, how many requests the failure policy answered, the
# allowances granted past the limit (bounded loss), the worst latency a client saw, how
# long the routers took to agree with ZooKeeper, how long a node cut off from ZooKeeper
# still answered directly, and whether every run passed.
#   bench/chaos.sh                       RUNS=3, each scenario with --duration 30s
#   CHAOS_ARGS="--duration 60s --rate 4000" RUNS=5 bench/chaos.sh node-kill slow-node
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
args=${CHAOS_ARGS:---duration 30s}
bash "$top/scripts/build.sh" release >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"; bench_cleanup' EXIT
if [ $# -gt 0 ]; then
    names=("$@")
else
    names=()
    for f in "$top"/tools/chaos/scenarios/*.ini; do names+=("$(basename "$f" .ini)"); done
fi
machine
echo "command: RUNS=$runs CHAOS_ARGS=\"$args\" bench/chaos.sh ${*:-}"
for s in "${names[@]}"; do
    for i in $(seq 1 "$runs"); do
        # shellcheck disable=SC2086
        "$bin/rl-chaos" run "$s" --json "$out/$s.$i.json" $args >"$out/$s.$i.out" 2>&1 || true
    done
done
python3 - "$out" "$runs" "${names[@]}" <<'PY'
import json, statistics, sys
out, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def fmt(x, unit=""):
    return "-" if x is None else (f"{x:,.0f}{unit}" if isinstance(x, (int, float)) else str(x))
print("| scenario | passed | shards moved after | policy answers | extra allowances | worst latency | routers agree within | stale direct answers |")
print("|---|---|---|---|---|---|---|---|")
for s in names:
    rows, passed = [], 0
    for i in range(1, runs + 1):
        try:
            with open(f"{out}/{s}.{i}.json") as f:
                j = json.load(f)
        except (OSError, ValueError):
            continue
        passed += j["pass"]
        rows.append(j["figures"])
    move = med([r["shard_move_ms"][0] if r["shard_move_ms"] else None for r in rows])
    print(f"| {s} | {passed}/{runs} | {fmt(move, ' ms')} "
          f"| {fmt(med([r['fail_open'] + r['fail_closed'] for r in rows]))} "
          f"| {fmt(med([r['extra_allowed'] for r in rows]))} "
          f"| {fmt(med([r['worst_latency_ms'] for r in rows]), ' ms')} "
          f"| {fmt(med([r['converge_max_ms'] for r in rows]), ' ms')} "
          f"| {fmt(med([r['stale_answers_ms'] for r in rows]), ' ms')} |")
PY
for f in "$out"/*.out; do
    if ! grep -q "^VERDICT .*: PASS" "$f"; then
        echo "--- $(basename "$f" .out) did not pass:"
        sed -n '/^invariant/,$p' "$f" | head -30
    fi
done
