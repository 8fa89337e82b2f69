#!/usr/bin/env bash
# Router workers (docs/BENCHMARKS.md, "Router workers"): throughput through rl-router with
# --workers 1 and --workers 2, alternating run by run, and the router's CPU per forwarded
# decision (utime + stime of the whole process, /proc/PID/stat, over the measured load).
# One node, static membership; nothing is pinned (a router of 2 workers needs both cores),
# so the node, the router and rl-bench share the machine's cores.
#   RUNS=3 bench/router_workers.sh        (RUNS=5 by default; DURATION=5 seconds a load)
#   LOG=1 RUNS=3 bench/router_workers.sh  the same with every request logged (request_log)
source "$(dirname "$0")/lib.sh"
build_release
work=$(mktemp -d)
nport=$(free_port)
rport=$(free_port)
machine
duration=${DURATION:-5}
cat > "$work/r.conf" <<CONF
[router]
listen = 127.0.0.1:$rport
deadline = 200ms
request_log = ${LOG:+$work/requests.log}
[node n]
listen = 127.0.0.1:$nport
memory = 2g
[service bench]
limit = token_bucket 1000 per 1s
CONF
"$bin/rl-node" --config "$work/r.conf" --name n 2>>"$work/node.log" &
pids+=($!)
wait_port $nport
load() {
    "$bin/rl-bench" --target 127.0.0.1:$rport --service bench --keys 1000000 \
        --connections 8 --pipeline 64 --duration "$1" --json | tail -1
}
one() { # WORKERS: prints "decisions/s cpu_us_per_decision"
    "$bin/rl-router" --config "$work/r.conf" --workers "$1" 2>>"$work/router.log" &
    local rpid=$!
    wait_port $rport
    sleep 0.3
    load 1 > /dev/null
    local t0 out t1 dps
    t0=$(ticks $rpid)
    out=$(load "$duration")
    t1=$(ticks $rpid)
    kill $rpid
    wait $rpid 2>/dev/null || true
    rm -f "$work/requests.log"
    dps=$(echo "$out" | json decisions_per_s)
    awk -v d="$dps" -v t=$((t1 - t0)) -v hz="$hz" -v s="$duration" \
        'BEGIN {printf "%d %.3f\n", d, (t / hz) * 1e6 / (d * s)}'
}
w1=(); w2=(); c1=(); c2=()
for i in $(seq 1 "$runs"); do
    read -r d c < <(one 1); w1+=("$d"); c1+=("$c")
    read -r d c < <(one 2); w2+=("$d"); c2+=("$c")
    echo "run $i: workers=1 ${w1[-1]}/s ${c1[-1]} us CPU/decision | workers=2 ${w2[-1]}/s ${c2[-1]} us CPU/decision"
done
m1=$(printf '%s\n' "${w1[@]}" | median); m2=$(printf '%s\n' "${w2[@]}" | median)
mc1=$(printf '%s\n' "${c1[@]}" | median); mc2=$(printf '%s\n' "${c2[@]}" | median)
echo "RESULT workers=1 $m1/s ($mc1 us router CPU per decision), workers=2 $m2/s ($mc2 us), throughput ratio $(awk -v a=$m2 -v b=$m1 'BEGIN {printf "%.2f", a/b}'), CPU ratio $(awk -v a=$mc2 -v b=$mc1 'BEGIN {printf "%.2f", a/b}')"
rm -rf "$work"
