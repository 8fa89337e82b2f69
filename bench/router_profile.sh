#!/usr/bin/env bash
# Profiles the router under the load of docs/BENCHMARKS.md, "Router cost per decision": one
# node (core 0) and one router (core 1, shared with rl-bench, so one worker) from the build
# directory BIN (default build/), token_bucket, 1M keys warmed up first, then rl-bench
# through the router (CONNS connections x PIPELINE pipelined, default 8 x 64, 8 s) while
# `perf record -F 2000 -g` samples the router for 5 s. Writes OUT (default
# router.perf.data) and prints the machine's load, the commit, the load's decisions/s, the
# router's and the node's CPU per forwarded decision over the whole run (/proc ticks; the
# sampling costs the router a few per cent) and the top of `perf report --no-children`.
#   bench/router_profile.sh [BIN] [OUT]      PERF_CALLGRAPH="--call-graph dwarf" for user stacks
#   CONNS=4 PIPELINE=256 bench/router_profile.sh     (the load of bench/compare.sh)
source "$(dirname "$0")/lib.sh"
b=${1:-$bin}
out=${2:-router.perf.data}
conns=${CONNS:-8}
pipe=${PIPELINE:-64}
command -v perf >/dev/null || { echo "bench/router_profile.sh: perf is missing" >&2; exit 2; }
scratch
nport=$(free_port)
rport=$(free_port)
one_node_conf > "$work/c.conf"
start_pair "$b" "$work/c.conf"
warm_up "$b"
machine
echo "commit: $(tree_rev); load: $conns connections x $pipe pipelined, 8 s"
echo "before: $(uptime)"
n0=$(ticks $node); r0=$(ticks $router)
taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$rport --service bench --keys 1000000 \
    --connections "$conns" --pipeline "$pipe" --duration 8 --json > "$work/bench.json" &
load=$!
sleep 1.5
perf record -F 2000 ${PERF_CALLGRAPH:--g} -o "$out" -p $router -- sleep 5 >/dev/null 2>&1
wait $load
n1=$(ticks $node); r1=$(ticks $router)
echo "after: $(uptime)"
dec=$(tail -1 "$work/bench.json" | json decisions)
rn=$(ns_per $((r1 - r0)) "$dec"); nn=$(ns_per $((n1 - n0)) "$dec")
echo "through the router: $(tail -1 "$work/bench.json" | json decisions_per_s) decisions/s"
echo "CPU per decision: router $rn ns, node $nn ns, router/node $(awk -v a=$rn -v b=$nn 'BEGIN {printf "%.2f", a/b}')"
perf report -i "$out" --no-children --stdio -g none --sort dso 2>/dev/null | grep -E '^ +[0-9]'
perf report -i "$out" --no-children --stdio -g none --percent-limit 0.7 2>/dev/null | grep -E '^ +[0-9]'
