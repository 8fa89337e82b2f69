#!/usr/bin/env bash
# What metrics cost a node (docs/BENCHMARKS.md, "Metrics"): one rl-node, static membership,
# token_bucket over 1M keys, pipelined, decisions/s, for
#   base     a baseline revision (default 2d0a9f8, before metrics existed),
#   off      this checkout without a metrics listener (what the counters and the per-batch
#            latency histogram cost by themselves),
#   scraped  this checkout with `metrics =` set and /metrics fetched every 100 ms during the
#            run (ten times a typical 1 s scrape interval).
# Rounds alternate base, off, scraped so all see the same machine conditions.
#   bench/metrics.sh [REV]          (RUNS=3 rounds by default)
# The node is pinned to core 0, rl-bench and the scraper to core 1.
source "$(dirname "$0")/lib.sh"
rev=${1:-2d0a9f8}
runs=${RUNS:-3}
bash "$top/scripts/build.sh" release >/dev/null
work=$(mktemp -d)
base=$work/base
git -C "$top" worktree add --detach "$base" "$rev" >/dev/null
cleanup() {
    bench_cleanup
    git -C "$top" worktree remove --force "$base" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
(cd "$base" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build build -j"$(nproc)" --target rl-node >/dev/null)
machine

port=$(free_port)
mport=$(free_port)
conf() { # NAME EXTRA
    cat > "$work/$1.conf" <<CONF
[cluster]
name = metrics-$1
[node n]
listen = 127.0.0.1:$port
memory = 4g
$2
[service bench]
limit = token_bucket 100 per 1m
CONF
}
conf base ""
conf off ""
conf scraped "metrics = 127.0.0.1:$mport"

declare -A results
for round in $(seq 1 "$runs"); do
    for side in base off scraped; do
        nodebin=$bin/rl-node
        [ "$side" = base ] && nodebin=$base/build/rl-node
        taskset -c 0 "$nodebin" --config "$work/$side.conf" --name n 2>>"$work/node-$side.log" &
        node=$!; pids=($node)
        wait_port "$port"
        taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench \
            --keys 1000000 --sequential --requests 1000000 --connections 4 --pipeline 256 \
            --json > /dev/null
        scraper=
        if [ "$side" = scraped ]; then
            (while sleep 0.1; do
                taskset -c 1 curl -sf "http://127.0.0.1:$mport/metrics" > "$work/last.prom" || echo "scrape failed" >&2
            done) &
            scraper=$!
            pids+=($scraper)
        fi
        out=$(taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench \
            --keys 1000000 --connections 4 --pipeline 256 --duration 5 --json | tail -1)
        [ -n "$scraper" ] && { kill "$scraper"; wait "$scraper" 2>/dev/null || true; }
        t=$(echo "$out" | json decisions_per_s)
        errs=$(echo "$out" | json errors)
        extra=
        if [ "$side" = scraped ]; then
            n=$(grep -c . "$work/last.prom")
            extra=", last scrape $n lines, $(grep '^rl_node_decision_duration_seconds_count' "$work/last.prom")"
        fi
        echo "$side round $round: $t decisions/s (errors ${errs:-0}, p50 $(echo "$out" | json p50_us) us$extra)"
        results[$side]+="$t "
        kill "$node"; wait "$node" 2>/dev/null || true; pids=()
    done
done
b=$(printf '%s\n' ${results[base]} | median)
for side in base off scraped; do
    m=$(printf '%s\n' ${results[$side]} | median)
    echo "RESULT $side: median $m decisions/s over $runs rounds ($(awk -v a=$m -v b=$b 'BEGIN {printf "%.3f", a/b}') of base $rev)"
done
