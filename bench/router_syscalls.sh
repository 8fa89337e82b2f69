#!/usr/bin/env bash
# Syscalls and context switches per 1000 decisions of the router and of the node for the
# same requests (docs/BENCHMARKS.md, "Where the binary path stands"): rl-bench through the
# router, CONNS connections x PIPE pipelined (default 8 x 64, router_cpu.sh's binary load),
# 1M keys created on the node first, 5 s; `perf stat -e raw_syscalls:sys_enter` on each
# process for 4 s of it; context switches summed over every thread (/proc/PID/task). Node on
# core 0, router (one worker) and rl-bench on core 1. RUNS rounds (default 3), each printed,
# then medians as a RESULT line.
#   bench/router_syscalls.sh            BIN=DIR (a Release build dir; default this tree's)
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
conns=${CONNS:-8}
pipe=${PIPE:-64}
command -v perf >/dev/null || { echo "router_syscalls.sh: perf is missing" >&2; exit 2; }
if [ -z "${BIN:-}" ]; then build_release; b=$bin; else b=$BIN; fi
work=$(mktemp -d)
trap 'bench_cleanup; rm -rf "$work"' EXIT
machine
echo "commit $(tree_rev); load before: $(uptime)"
# cs PID: voluntary + involuntary context switches of every thread of PID.
cs() { cat /proc/$1/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s}'; }
sys_of() { awk '/sys_enter/ {gsub(",", "", $1); print $1}' "$1"; }
per_k() { awk -v a="$1" -v n="$2" 'BEGIN {printf "%.1f", a * 1000 / n}'; }
declare -a R_SYS N_SYS R_CS N_CS R_NS N_NS
for i in $(seq 1 "$runs"); do
    nport=$(free_port); rport=$(free_port)
    one_node_conf > "$work/x.conf"
    taskset -c 0 "$b/rl-node" --config "$work/x.conf" --name n >/dev/null 2>>"$work/node.log" &
    node=$!; pids+=($node)
    taskset -c 1 "$b/rl-router" --config "$work/x.conf" >/dev/null 2>>"$work/router.log" &
    router=$!; pids+=($router)
    wait_port $nport && wait_port $rport || { echo "router_syscalls.sh: no start (logs in $work)" >&2; exit 1; }
    sleep 0.3
    warm_up "$b"
    (sleep 0.5; perf stat -e raw_syscalls:sys_enter -p $router -o "$work/r.txt" -- sleep 4) &
    pr=$!
    (sleep 0.5; perf stat -e raw_syscalls:sys_enter -p $node -o "$work/n.txt" -- sleep 4) &
    pn=$!
    r0=$(ticks $router); n0=$(ticks $node); rc0=$(cs $router); nc0=$(cs $node)
    out=$(taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$rport --service bench --keys 1000000 \
        --connections "$conns" --pipeline "$pipe" --duration 5 --json | tail -1)
    wait $pr $pn
    dec=$(echo "$out" | json decisions)
    # the 4 s of perf are 4/5 of the run's decisions
    sub=$(awk -v n="$dec" 'BEGIN {printf "%.0f", n * 0.8}')
    R_SYS+=("$(per_k "$(sys_of "$work/r.txt")" "$sub")"); N_SYS+=("$(per_k "$(sys_of "$work/n.txt")" "$sub")")
    R_CS+=("$(per_k $(($(cs $router) - rc0)) "$dec")"); N_CS+=("$(per_k $(($(cs $node) - nc0)) "$dec")")
    R_NS+=("$(ns_per $(($(ticks $router) - r0)) "$dec")"); N_NS+=("$(ns_per $(($(ticks $node) - n0)) "$dec")")
    echo "round $i: $dec decisions; per 1000 decisions: syscalls router ${R_SYS[-1]} node ${N_SYS[-1]}, context switches router ${R_CS[-1]} node ${N_CS[-1]}; CPU per decision router ${R_NS[-1]} ns node ${N_NS[-1]} ns"
    bench_cleanup
done
med() { printf '%s\n' "$@" | median; }
echo "RESULT ${conns}x${pipe}, per 1000 decisions (medians of $runs): syscalls router $(med "${R_SYS[@]}") node $(med "${N_SYS[@]}"), context switches router $(med "${R_CS[@]}") node $(med "${N_CS[@]}"); CPU per decision router $(med "${R_NS[@]}") ns node $(med "${N_NS[@]}") ns [load $(cut -d' ' -f1-3 /proc/loadavg), commit $(tree_rev)]"
