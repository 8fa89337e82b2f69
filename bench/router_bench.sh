#!/usr/bin/env bash
# Router benchmarks (docs/BENCHMARKS.md): throughput through rl-router vs straight to the
# node (same client, same run), the latency the router adds at a fixed rate, and the cost of
# the request log (on vs off). One node, static membership, so both paths reach the same
# node. 2-core machine: node on core 0, router on core 1, rl-bench on core 1 too (stated in
# the docs: the router's figures include sharing its core with the load generator).
#   bench/router_bench.sh   (RUNS=5 by default)
source "$(dirname "$0")/lib.sh"
bash "$top/scripts/build.sh" release >/dev/null
work=$(mktemp -d)
nport=$(free_port)
rport=$(free_port)
machine
rate=${RATE:-100000}

write_conf() { # LOGPATH
    cat > "$work/r.conf" <<CONF
[router]
listen = 127.0.0.1:$rport
deadline = 200ms
request_log = $1
[node n]
listen = 127.0.0.1:$nport
memory = 2g
[service bench]
limit = token_bucket 1000 per 1s
CONF
}
start() {
    taskset -c 0 "$bin/rl-node" --config "$work/r.conf" --name n 2>>"$work/node.log" &
    pids+=($!)
    taskset -c 1 "$bin/rl-router" --config "$work/r.conf" 2>>"$work/router.log" &
    pids+=($!)
    wait_port $nport
    wait_port $rport
    sleep 0.3
}
load() { # PORT EXTRA...
    local p=$1
    shift
    taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$p --service bench --keys 1000000 \
        --connections 8 --pipeline 64 "$@" --json | tail -1
}

write_conf ""
start
load $nport --duration 2 > /dev/null
d=(); r=(); dl50=(); dl99=(); rl50=(); rl99=()
for i in $(seq 1 "$runs"); do
    d+=("$(load $nport --duration 5 | json decisions_per_s)")
    r+=("$(load $rport --duration 5 | json decisions_per_s)")
    o=$(load $nport --duration 5 --rate $rate); dl50+=("$(echo "$o" | json p50_us)"); dl99+=("$(echo "$o" | json p99_us)")
    o=$(load $rport --duration 5 --rate $rate); rl50+=("$(echo "$o" | json p50_us)"); rl99+=("$(echo "$o" | json p99_us)")
    echo "run $i: direct ${d[-1]}/s router ${r[-1]}/s | at $rate/s direct p50 ${dl50[-1]} p99 ${dl99[-1]} us, router p50 ${rl50[-1]} p99 ${rl99[-1]} us"
done
md=$(printf '%s\n' "${d[@]}" | median); mr=$(printf '%s\n' "${r[@]}" | median)
echo "RESULT throughput direct $md/s, through router $mr/s, ratio $(awk -v a=$mr -v b=$md 'BEGIN {printf "%.2f", a/b}')"
echo "RESULT latency at $rate/s: direct p50 $(printf '%s\n' "${dl50[@]}" | median) us p99 $(printf '%s\n' "${dl99[@]}" | median) us; router p50 $(printf '%s\n' "${rl50[@]}" | median) us p99 $(printf '%s\n' "${rl99[@]}" | median) us"
bench_cleanup

# Request log on vs off, through the router, closed loop.
off=(); on=()
for i in $(seq 1 "$runs"); do
    write_conf ""
    start
    off+=("$(load $rport --duration 5 | json decisions_per_s)")
    bench_cleanup
    write_conf "$work/requests.log"
    start
    on+=("$(load $rport --duration 5 | json decisions_per_s)")
    bench_cleanup
    lines=$(wc -l < "$work/requests.log")
    rm -f "$work/requests.log"
    echo "run $i: log off ${off[-1]}/s, log on ${on[-1]}/s ($lines lines written)"
done
moff=$(printf '%s\n' "${off[@]}" | median); mon=$(printf '%s\n' "${on[@]}" | median)
echo "RESULT request log: off $moff/s, on $mon/s, overhead $(awk -v a=$mon -v b=$moff 'BEGIN {printf "%.1f", (1-a/b)*100}')%"
rm -rf "$work"
