#!/usr/bin/env bash
# Profiles the router under the load of bench/compare.sh (docs/BENCHMARKS.md, "Router cost
# per decision"): one node (core 0) and one router (core 1, shared with rl-bench) from the
# build directory BIN (default build/), token_bucket, 1M keys warmed up first, then
# rl-bench through the router (4 connections x 256 pipelined, 8 s) while
# `perf record -F 2000 -g` samples the router for 5 s. Writes OUT (default
# router.perf.data) and prints the load's decisions/s and the top of
# `perf report --no-children`.
#   bench/router_profile.sh [BIN] [OUT]      PERF_CALLGRAPH="--call-graph dwarf" for user stacks
source "$(dirname "$0")/lib.sh"
b=${1:-$bin}
out=${2:-router.perf.data}
command -v perf >/dev/null || { echo "bench/router_profile.sh: perf is missing" >&2; exit 2; }
scratch
nport=$(free_port)
rport=$(free_port)
one_node_conf > "$work/c.conf"
start_pair "$b" "$work/c.conf"
warm_up "$b"
taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$rport --service bench --keys 1000000 \
    --connections 4 --pipeline 256 --duration 8 --json > "$work/bench.json" &
load=$!
sleep 1.5
perf record -F 2000 ${PERF_CALLGRAPH:--g} -o "$out" -p $router -- sleep 5 >/dev/null 2>&1
wait $load
echo "machine: $(uptime)"
echo "through the router: $(tail -1 "$work/bench.json" | json decisions_per_s) decisions/s"
perf report -i "$out" --no-children --stdio -g none --sort dso 2>/dev/null | grep -E '^ +[0-9]'
perf report -i "$out" --no-children --stdio -g none --percent-limit 1 2>/dev/null | grep -E '^ +[0-9]'
