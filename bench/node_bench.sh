#!/usr/bin/env bash
# Node benchmarks (docs/BENCHMARKS.md): decisions/s of one rl-node on one core with
# pipelining (token_bucket over 1M keys), p50/p99 latency at half that load, and resident
# memory per active key at 1M and 10M keys for each algorithm.
#   bench/node_bench.sh [throughput|latency|memory|all]   (RUNS=5 by default)
# The node is pinned to core 0 and rl-bench to core 1. Builds Release first. Each throughput
# run also prints the CPU the node and rl-bench used (/proc/PID/stat: the figure counts when
# the node, not the load generator, is the one near 100% of its core), and the key table's
# resizes over the runs (rl_node_table_resizes_total: 0 while the key set is constant).
source "$(dirname "$0")/lib.sh"
what=${1:-all}
build_release
work=$(mktemp -d)
port=$(free_port)
mport=$(free_port)
machine
resizes() { # the node's key-table resizes so far (grows + shrinks)
    { exec 3<>"/dev/tcp/127.0.0.1/$mport" && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3; } 2>/dev/null |
        awk '/^rl_node_table_resizes_total/ {n += $2} END {print n + 0}'
}

start_node() { # CONF
    taskset -c 0 "$bin/rl-node" --config "$1" --name n --listen 127.0.0.1:$port 2>>"$work/node.log" &
    node=$!
    pids+=($node)
    wait_port $port
}
stop_node() { kill "$node"; wait "$node" 2>/dev/null || true; pids=(); }

cat > "$work/tb.conf" <<CONF
[node n]
listen = 127.0.0.1:$port
metrics = 127.0.0.1:$mport
memory = 4g
[service bench]
limit = token_bucket 100 per 1m
CONF

if [ "$what" = all ] || [ "$what" = throughput ] || [ "$what" = latency ]; then
    start_node "$work/tb.conf"
    # Warm up: create the 1M keys once.
    taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench --keys 1000000 \
        --sequential --requests 1000000 --connections 4 --pipeline 256 --json > /dev/null
    tput=()
    r0=$(resizes)
    for i in $(seq 1 "$runs"); do
        taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench --keys 1000000 \
            --connections 4 --pipeline 256 --duration 5 --json > "$work/run.json" &
        lg=$!
        sleep 1 # connected and at full speed: measure CPU over the next 3 s
        n0=$(ticks $node); l0=$(ticks $lg); t0=$(date +%s%N)
        sleep 3
        n1=$(ticks $node); l1=$(ticks $lg); t1=$(date +%s%N)
        wait $lg
        out=$(tail -1 "$work/run.json")
        t=$(echo "$out" | json decisions_per_s)
        tput+=("$t")
        cpu() { awk -v t=$1 -v hz=$hz -v ns=$((t1 - t0)) 'BEGIN {printf "%.0f%%", t / hz * 1e9 / ns * 100}'; }
        echo "throughput run $i: $t decisions/s (p50 $(echo "$out" | json p50_us) us, p99 $(echo "$out" | json p99_us) us; CPU: node $(cpu $((n1 - n0))), rl-bench $(cpu $((l1 - l0))))"
    done
    med=$(printf '%s\n' "${tput[@]}" | median)
    echo "RESULT node token_bucket 1M keys pipelined: median $med decisions/s over $runs runs; key-table resizes during the runs: $(($(resizes) - r0))"
    if [ "$what" != latency ] && [ "${NO_REDIS:-0}" != 1 ]; then
        # Baseline in the same run: Redis + a Lua token bucket, same cores, same pipelining.
        command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
        rport=$(free_port)
        taskset -c 0 redis-server --port $rport --save "" --appendonly no --daemonize no \
            --logfile "$work/redis.log" &
        pids+=($!)
        wait_port $rport
        sha=$(redis-cli -p $rport SCRIPT LOAD "$(cat "$top/bench/redis_tb.lua")")
        rtput=()
        for i in $(seq 1 "$runs"); do
            r=$(taskset -c 1 redis-benchmark -p $rport -c 4 -P 256 -n 3000000 -r 1000000 -q \
                EVALSHA "$sha" 1 'tb:__rand_int__' 1000 1000 1000 1 | tr '\r' '\n' |
                grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
            rtput+=("$r")
            echo "redis+lua run $i: $r decisions/s"
        done
        rmed=$(printf '%s\n' "${rtput[@]}" | median)
        echo "RESULT redis+lua token bucket 1M keys pipelined: median $rmed decisions/s; rl-node/redis = $(awk -v a=$med -v b=$rmed 'BEGIN {printf "%.1f", a/b}')x"
        redis-cli -p $rport shutdown nosave >/dev/null 2>&1 || true
    fi
    if [ "$what" != throughput ]; then
        half=$(awk -v m="$med" 'BEGIN {printf "%d", m / 2}')
        p50s=(); p99s=(); p999s=()
        for i in $(seq 1 "$runs"); do
            out=$(taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench --keys 1000000 \
                --connections 4 --pipeline 256 --rate "$half" --duration 5 --json | tail -1)
            p50s+=("$(echo "$out" | json p50_us)"); p99s+=("$(echo "$out" | json p99_us)")
            p999s+=("$(echo "$out" | json p999_us)")
            echo "latency run $i at $half/s: achieved $(echo "$out" | json decisions_per_s)/s p50 ${p50s[-1]} us p99 ${p99s[-1]} us p999 ${p999s[-1]} us"
        done
        echo "RESULT node latency at $half req/s (half the median throughput): median p50 $(printf '%s\n' "${p50s[@]}" | median) us, p99 $(printf '%s\n' "${p99s[@]}" | median) us, p999 $(printf '%s\n' "${p999s[@]}" | median) us"
    fi
    stop_node
fi

if [ "$what" = all ] || [ "$what" = memory ]; then
    # One key per user: a limit whose first request leaves the key short of full allowance
    # for an hour, so none is forgotten while we measure.
    for algo in token_bucket gcra leaky_bucket fixed_window sliding_window_counter sliding_window_log; do
        for keys in 1000000 10000000; do
            cat > "$work/mem.conf" <<CONF
[node n]
listen = 127.0.0.1:$port
memory = 8g
[service mem]
limit = $algo 100 per 1h
CONF
            start_node "$work/mem.conf"
            base=$(rss_kb "$node")
            taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service mem --keys $keys \
                --sequential --requests $keys --connections 4 --pipeline 256 --json > /dev/null
            rss=$(rss_kb "$node")
            held=$("$bin/rl-cli" --target 127.0.0.1:$port stats | awk '$1=="keys" {print $2}')
            echo "RESULT memory $algo keys=$held rss=${rss}kB baseline=${base}kB all-in=$(awk -v r=$rss -v k=$held 'BEGIN {printf "%.1f", r*1024/k}') B/key added=$(awk -v r=$rss -v b=$base -v k=$held 'BEGIN {printf "%.1f", (r-b)*1024/k}') B/key"
            stop_node
        done
    done
fi
rm -rf "$work"
