#!/usr/bin/env bash
# Before/after comparison of the hot paths (docs/BENCHMARKS.md, "Before and after a
# change"): builds a base revision of this repository (BASE, default HEAD~1) into a scratch
# directory beside the current tree's Release build, then, in the same run and alternating
# base and current each round, measures
#   - node decisions/s straight to one rl-node (token_bucket, 1M keys, 4 connections x 256
#     pipelined, 5 s) and the node's CPU per decision;
#   - the same load through one rl-router: decisions/s, the router's CPU per forwarded
#     decision and the node's, and their ratio.
# CPU comes from /proc/PID/stat (utime + stime) around each 5 s run. Node on core 0, router
# on core 1, rl-bench on core 1 (the router shares its core with the load generator).
#   bench/compare.sh [BASE]     (RUNS=3 by default; medians are printed as RESULT lines)
source "$(dirname "$0")/lib.sh"
base_rev=${1:-${BASE:-HEAD~1}}
runs=${RUNS:-3}
build_release
work=$(mktemp -d)
trap 'bench_cleanup; git -C "$top" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$top" worktree add --detach -q "$work/src" "$base_rev"
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target rl-node rl-router rl-bench >/dev/null
machine
echo "base: $(git -C "$top" rev-parse --short "$base_rev"), current: $(tree_rev)"
nport=$(free_port)
rport=$(free_port)
one_node_conf > "$work/c.conf"

# round BIN: starts a node and a router from BIN, measures direct and routed; prints
# "direct_dps node_ns_direct routed_dps router_ns node_ns_routed".
round() {
    local b=$1 node router out
    start_pair "$b" "$work/c.conf"
    warm_up "$b"  # the 1M keys exist before any measured run
    out=$(measure_pair "$b" 5)  # 5 s closed-loop runs
    bench_cleanup
    echo "$out"
}
declare -A col
for i in $(seq 1 "$runs"); do
    for which in base current; do
        b=$bin; [ $which = base ] && b=$work/build
        read -r d nd rd rn nn < <(round "$b")
        echo "run $i $which: direct $d/s (node $nd ns/decision) | routed $rd/s (router $rn ns, node $nn ns per decision)"
        col[$which.d]+="$d "; col[$which.nd]+="$nd "; col[$which.rd]+="$rd "
        col[$which.rn]+="$rn "; col[$which.nn]+="$nn "
    done
done
med() { printf '%s\n' ${col[$1]} | median; }
for which in base current; do
    echo "RESULT $which: direct $(med $which.d)/s, node $(med $which.nd) ns/decision; routed $(med $which.rd)/s, router $(med $which.rn) ns and node $(med $which.nn) ns per decision, router/node $(awk -v a=$(med $which.rn) -v b=$(med $which.nn) 'BEGIN {printf "%.2f", a/b}')"
done
echo "RESULT current/base: direct $(awk -v a=$(med current.d) -v b=$(med base.d) 'BEGIN {printf "%.3f", a/b}'), routed $(awk -v a=$(med current.rd) -v b=$(med base.rd) 'BEGIN {printf "%.3f", a/b}'), router CPU per decision $(awk -v a=$(med current.rn) -v b=$(med base.rn) 'BEGIN {printf "%.3f", a/b}')"
