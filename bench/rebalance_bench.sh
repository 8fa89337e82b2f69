#!/usr/bin/env bash
# Rebalance benchmarks (docs/REBALANCE.md; the lead copies them into docs/BENCHMARKS.md):
#   throughput  request-log lines per second that rl-rebalance reads on one core (the tool's
#               own scan timer: reading, parsing and counting, not start-up or the plan), for
#               Zipf(1.0) keys and for uniform keys (the cache's worst case), median of RUNS;
#   balance     the max/mean per-node load reached for a 1M-key Zipf(1.0) log over 8 nodes,
#               without a budget and with budgets of 10, 5, 2 and 1% of the traffic, and what
#               that plan gives on a second, independent sample of the same traffic.
#   bench/rebalance_bench.sh [throughput|balance|all]
# Environment: RUNS (default 5), LINES (default 20000000), RL_BIN_DIR (use the binaries there
# instead of building build/ first). rl-rebalance runs pinned to core 0.
source "$(dirname "$0")/lib.sh"
what=${1:-all}
lines=${LINES:-20000000}
if [ -n "${RL_BIN_DIR:-}" ]; then
    bin=$RL_BIN_DIR
else
    bash "$top/scripts/build.sh" release >/dev/null
fi
work=$(mktemp -d)
trap 'bench_cleanup; rm -rf "$work"' EXIT
machine
echo "nproc: $(nproc)"

# Eight static nodes a..h: no ZooKeeper, nothing is written (--dry-run, or --out to $work).
{
    printf '[cluster]\nname = bench\nshards = 4096\n'
    i=1
    for n in a b c d e f g h; do
        printf '[node %s]\nlisten = 127.0.0.1:%d\n' "$n" $((7400 + i))
        i=$((i + 1))
    done
} > "$work/bench.conf"

# run CMD...: prints the command, then runs it.
run() { echo "command: $*" >&2; "$@"; }
# field NAME < summary line
field() { grep -o " $1=[^ ]*" | head -1 | cut -d= -f2; }

gen() { # OUT ZIPF DRAW_SEED
    run "$bin/rl-genlog" --keys 1000000 --zipf "$2" --lines "$lines" --seed 1 --draw-seed "$3" \
        --shards 4096 --nodes a,b,c,d,e,f,g,h > "$1"
}

if [ "$what" = all ] || [ "$what" = throughput ]; then
    for dist in 1.0 0; do
        log=$work/tput-$dist.log
        gen "$log" "$dist" 1
        echo "log: $(wc -l < "$log") lines, $(du -m "$log" | cut -f1) MiB, $(awk '{n += length($0) + 1} END {printf "%.1f", n / NR}' "$log") bytes per line"
        cat "$log" > /dev/null # into the page cache
        rates=()
        for i in $(seq 1 "$runs"); do
            out=$(run taskset -c 0 "$bin/rl-rebalance" --config "$work/bench.conf" --dry-run --quiet "$log" | tail -1)
            secs=$(echo "$out" | field scan_seconds)
            n=$(echo "$out" | field lines)
            rate=$(awk -v n="$n" -v s="$secs" 'BEGIN {printf "%.0f", n / s}')
            rates+=("$rate")
            echo "throughput zipf=$dist run $i: $n lines in $secs s = $rate lines/s"
        done
        echo "RESULT rebalance scan zipf=$dist 1M keys: median $(printf '%s\n' "${rates[@]}" | median) lines/s over $runs runs (one core)"
        rm -f "$log"
    done
fi

if [ "$what" = all ] || [ "$what" = balance ]; then
    gen "$work/day1.log" 1.0 1
    gen "$work/day2.log" 1.0 2
    for budget in 100 10 5 2 1; do
        out=$(run "$bin/rl-rebalance" --config "$work/bench.conf" --budget "$budget" --out "$work/plan.asg" --quiet "$work/day1.log" | tail -1)
        again=$(run "$bin/rl-rebalance" --config "$work/bench.conf" --assignment "$work/plan.asg" --dry-run --quiet "$work/day2.log" | tail -1)
        echo "RESULT rebalance balance zipf=1.0 1M keys 8 nodes budget=$budget%: max/mean $(echo "$out" | field before) -> $(echo "$out" | field after), moved $(echo "$out" | field moved_shards) shards = $(echo "$out" | field moved_load) of the traffic (budget_hit=$(echo "$out" | field budget_hit)); on a second sample: $(echo "$again" | field before)"
    done
fi
