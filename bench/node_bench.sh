#!/usr/bin/env bash
# Node benchmarks (docs/BENCHMARKS.md): decisions/s of one rl-node on one core with
# pipelining (token_bucket over 1M keys) against Redis + a Lua token bucket in the same run,
# p50/p99 latency at half that load, and resident memory per active key at 1M and 10M keys
# for each algorithm.
#   bench/node_bench.sh [throughput|latency|memory|all]   (RUNS=5 by default)
# The node (and Redis) run on core 0, rl-bench (and redis-benchmark) on core 1. Builds
# Release first. It prints first what the figures were taken on (CPU, virtualisation,
# kernel, transparent huge pages, commit, load average), and each RESULT line ends with the
# load average and commit of its moment, as a figure means little without them.
# Throughput: the rounds interleave one run of each contender (the node; the node with its
# key table in 4 KiB pages, RL_KEYTAB_HUGEPAGES=0, unless HUGE_AB=0; Redis + Lua unless
# NO_REDIS=1), so that another tenant's load falls on all of them alike; each round prints
# its ratio, and the result is the median of each and the median of the rounds' ratios.
# BASE_BIN=DIR makes the second contender DIR/rl-node (another build, huge pages as the
# first) instead of the 4 KiB-page node: a before/after of a change in the same rounds.
# Each run prints the CPU the server and its load generator used (/proc/PID/stat): the
# figure is the server's when the server, not the load generator, is the one near 100% of
# its core. Also the key table's resizes over the runs (0 while the key set is constant).
#   memory: ALGOS="token_bucket gcra" KEYS="1000000" narrow it down.
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

# What the figures were taken on.
thp() { sed -n 's/.*\[\(.*\)\].*/\1/p' "/sys/kernel/mm/transparent_hugepage/$1" 2>/dev/null || echo unknown; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
context() { echo "[load $(load), commit $(tree_rev), $(date -u +%H:%M:%SZ)]"; }
echo "virtualisation: $(systemd-detect-virt 2>/dev/null || echo unknown), hypervisor $(lscpu | sed -n 's/^Hypervisor vendor: *//p' | head -1); L2 $(lscpu | sed -n 's/^L2 cache: *//p'), L3 $(lscpu | sed -n 's/^L3 cache: *//p')"
echo "kernel $(uname -r); transparent huge pages: enabled=$(thp enabled) defrag=$(thp defrag)"
echo "commit $(tree_rev); load average $(load) (the machine's $(nproc) cores)"
# huge_kb PID: the kB of PID's memory in transparent huge pages.
huge_kb() { awk '/^AnonHugePages/ {print $2}' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
# huge_settled PID: the table fills in 4 KiB pages and its sweeps then collapse it into huge
# pages, a 2 MiB piece each (every 100 ms): waits until PID's huge pages stop growing (or 60 s).
huge_settled() {
    local h0=-1 h1
    for _ in $(seq 1 60); do
        sleep 1
        h1=$(huge_kb "$1")
        [ "$h1" = "$h0" ] && break
        h0=$h1
    done
}
pct() { awk -v t=$1 -v hz=$hz -v ns=$2 'BEGIN {printf "%.0f%%", t / hz * 1e9 / ns * 100}'; }

if [ "$what" = all ] || [ "$what" = throughput ] || [ "$what" = latency ]; then
    start_node "$work/tb.conf"
    # Warm up: create the 1M keys once.
    taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench --keys 1000000 \
        --sequential --requests 1000000 --connections 4 --pipeline 256 --json > /dev/null
    huge_settled $node
    echo "node: $(($(huge_kb $node) / 1024)) MiB of its memory in huge pages after the warm-up"
    r0=$(resizes)
    # node_run PORT PID LABEL: one 5 s closed-loop run against the node on PORT; prints the
    # run's line and leaves its decisions/s in $t.
    node_run() {
        local p=$1 pid=$2 label=$3 lg n0 n1 l0 l1 t0 t1 s0 s1 out
        s0=$(ticks $pid)
        taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$p --service bench --keys 1000000 \
            --connections 4 --pipeline 256 --duration 5 --json > "$work/run.json" &
        lg=$!
        sleep 1 # connected and at full speed: measure CPU over the next 3 s
        n0=$(ticks $pid); l0=$(ticks $lg); t0=$(date +%s%N)
        sleep 3
        n1=$(ticks $pid); l1=$(ticks $lg); t1=$(date +%s%N)
        wait $lg
        s1=$(ticks $pid)
        out=$(tail -1 "$work/run.json")
        t=$(echo "$out" | json decisions_per_s)
        c=$(ns_per $((s1 - s0)) "$(echo "$out" | json decisions)")
        echo "  $label: $t decisions/s, $c ns of the node's CPU per decision (p50 $(echo "$out" | json p50_us) us, p99 $(echo "$out" | json p99_us) us; CPU: node $(pct $((n1 - n0)) $((t1 - t0))), rl-bench $(pct $((l1 - l0)) $((t1 - t0))))"
    }
    ab=0
    if [ "${HUGE_AB:-1}" != 0 ] && [ "$what" != latency ]; then
        # The same node with its key table in 4 KiB pages, side by side.
        port2=$(free_port)
        sed "s/127.0.0.1:$port/127.0.0.1:$port2/; /^metrics/d" "$work/tb.conf" > "$work/tb4k.conf"
        if [ -n "${BASE_BIN:-}" ]; then
            taskset -c 0 "$BASE_BIN/rl-node" --config "$work/tb4k.conf" --name n \
                --listen 127.0.0.1:$port2 2>>"$work/node.log" &
            blabel="rl-node of $BASE_BIN"
        else
            RL_KEYTAB_HUGEPAGES=0 taskset -c 0 "$bin/rl-node" --config "$work/tb4k.conf" --name n \
                --listen 127.0.0.1:$port2 2>>"$work/node.log" &
            blabel="rl-node, 4 KiB pages"
        fi
        node2=$!
        pids+=($node2)
        wait_port $port2
        taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port2 --service bench --keys 1000000 \
            --sequential --requests 1000000 --connections 4 --pipeline 256 --json > /dev/null
        if [ -n "${BASE_BIN:-}" ]; then
            huge_settled $node2 # another build: its table collapses as the first one's did
        fi
        echo "$blabel: $(($(huge_kb $node2) / 1024)) MiB in huge pages"
        ab=1
    fi
    redis=0
    if [ "$what" != latency ] && [ "${NO_REDIS:-0}" != 1 ]; then
        # Baseline in the same run: Redis + a Lua token bucket, same cores, same pipelining.
        command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
        rport=$(free_port)
        taskset -c 0 redis-server --port $rport --save "" --appendonly no --daemonize no \
            --logfile "$work/redis.log" &
        rpid=$!
        pids+=($rpid)
        wait_port $rport
        sha=$(redis-cli -p $rport SCRIPT LOAD "$(cat "$top/bench/redis_tb.lua")")
        echo "redis: $(redis-server --version | cut -d' ' -f3)"
        redis=1
    fi
    tput=(); tput4k=(); rtput=(); ratios=(); cpu=(); cpu4k=(); rcpu=(); cratios=()
    for i in $(seq 1 "$runs"); do
        echo "round $i (load $(load)):"
        node_run $port $node "rl-node"
        tput+=("$t"); cpu+=("$c")
        if [ $ab = 1 ]; then
            node_run $port2 $node2 "$blabel"
            tput4k+=("$t"); cpu4k+=("$c")
        fi
        if [ $redis = 1 ]; then
            # redis-benchmark has no duration: REDIS_N requests, by default 5 s at the pace of
            # the previous round (200,000 in the first). Short, so that the node's keys do not
            # sit idle for RL_KEYTAB_SHRINK_MS (30 s) between its runs, which would let its
            # table shrink and grow back (resizes below).
            s0=$(ticks $rpid); w0=$(date +%s%N)
            rn=${REDIS_N:-$( ((${#rtput[@]})) && awk -v r="${rtput[-1]}" 'BEGIN {printf "%d", r * 5 + 1000}' || echo 200000)}
            out=$( (taskset -c 1 redis-benchmark -p $rport -c 4 -P 256 -n "$rn" \
                -r 1000000 -q EVALSHA "$sha" 1 'tb:__rand_int__' 1000 1000 1000 1 | tr '\r' '\n'
                times) )
            s1=$(ticks $rpid); w1=$(date +%s%N)
            r=$(echo "$out" | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
            # `times`, second line: the CPU redis-benchmark used, user and system.
            lgcpu=$(echo "$out" | tail -1 | awk '{u=$1; s=$2; gsub(/[ms]/," ",u); gsub(/[ms]/," ",s); split(u,a," "); split(s,b," "); print (a[1]*60+a[2]+b[1]*60+b[2])}')
            rc=$(ns_per $((s1 - s0)) "$rn")
            rtput+=("$r"); rcpu+=("$rc")
            ratios+=("$(awk -v a="${tput[-1]}" -v b="$r" 'BEGIN {printf "%.1f", a / b}')")
            cratios+=("$(awk -v a="${cpu[-1]}" -v b="$rc" 'BEGIN {printf "%.1f", b / a}')")
            echo "  redis+lua: $r decisions/s, $rc ns of redis-server's CPU per decision (CPU over the run: redis-server $(pct $((s1 - s0)) $((w1 - w0))), redis-benchmark $(awk -v c=$lgcpu -v ns=$((w1 - w0)) 'BEGIN {printf "%.0f%%", c * 1e9 / ns * 100}')); rl-node/redis this round: ${ratios[-1]}x the decisions/s, ${cratios[-1]}x less CPU per decision"
        fi
    done
    med=$(printf '%s\n' "${tput[@]}" | median)
    echo "RESULT node token_bucket 1M keys pipelined: median $med decisions/s, $(printf '%s\n' "${cpu[@]}" | median) ns of CPU per decision over $runs runs; key-table resizes during the runs: $(($(resizes) - r0)) $(context)"
    if [ $ab = 1 ]; then
        med4k=$(printf '%s\n' "${tput4k[@]}" | median)
        if [ -n "${BASE_BIN:-}" ]; then
            echo "RESULT $blabel: median $med4k decisions/s, $(printf '%s\n' "${cpu4k[@]}" | median) ns of CPU per decision; this build/that = $(awk -v a=$med -v b=$med4k 'BEGIN {printf "%.2f", a/b}')x the decisions/s $(context)"
        else
            echo "RESULT node, key table in 4 KiB pages: median $med4k decisions/s, $(printf '%s\n' "${cpu4k[@]}" | median) ns of CPU per decision; huge pages/4 KiB = $(awk -v a=$med -v b=$med4k 'BEGIN {printf "%.2f", a/b}')x the decisions/s $(context)"
        fi
        kill "$node2"; wait "$node2" 2>/dev/null || true
    fi
    if [ $redis = 1 ]; then
        rmed=$(printf '%s\n' "${rtput[@]}" | median)
        echo "RESULT redis+lua token bucket 1M keys pipelined: median $rmed decisions/s, $(printf '%s\n' "${rcpu[@]}" | median) ns of CPU per decision; rl-node/redis = $(awk -v a=$med -v b=$rmed 'BEGIN {printf "%.1f", a/b}')x (medians), median of the rounds' ratios $(printf '%s\n' "${ratios[@]}" | median)x; CPU per decision redis/rl-node: median of the rounds' ratios $(printf '%s\n' "${cratios[@]}" | median)x $(context)"
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
        echo "RESULT node latency at $half req/s (half the median throughput): median p50 $(printf '%s\n' "${p50s[@]}" | median) us, p99 $(printf '%s\n' "${p99s[@]}" | median) us, p999 $(printf '%s\n' "${p999s[@]}" | median) us $(context)"
    fi
    stop_node
fi

if [ "$what" = all ] || [ "$what" = memory ]; then
    # One key per user: a limit whose first request leaves the key short of full allowance
    # for an hour, so none is forgotten while we measure. All-in is the node's whole resident
    # memory (VmRSS: its anonymous memory, huge pages included, and the pages of its binary
    # and shared libraries it has touched) over its keys; `table` is the key table's own
    # bytes (rl-cli stats memory_bytes).
    rss_field() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
    for algo in ${ALGOS:-token_bucket gcra leaky_bucket fixed_window sliding_window_counter sliding_window_log}; do
        for keys in ${KEYS:-1000000 10000000}; do
            cat > "$work/mem.conf" <<CONF
[node n]
listen = 127.0.0.1:$port
memory = 4g
[service mem]
limit = $algo 100 per 1h
CONF
            start_node "$work/mem.conf"
            base=$(rss_kb "$node")
            taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service mem --keys $keys \
                --sequential --requests $keys --connections 4 --pipeline 256 --json > /dev/null
            rss=$(rss_kb "$node")
            stats=$("$bin/rl-cli" --target 127.0.0.1:$port stats)
            held=$(echo "$stats" | awk '$1=="keys" {print $2}')
            table=$(echo "$stats" | awk '$1=="memory_bytes" {print $2}')
            per() { awk -v b="$1" -v k=$held 'BEGIN {printf "%.1f", b / k}'; }
            echo "RESULT memory $algo keys=$held all-in=$(per $((rss * 1024))) B/key (rss=${rss}kB: anon $(rss_field $node RssAnon)kB of which huge pages $(huge_kb $node)kB, files $(rss_field $node RssFile)kB; baseline before the keys ${base}kB) added=$(per $(((rss - base) * 1024))) B/key table=$(per $table) B/key $(context)"
            stop_node
        done
    done
fi
rm -rf "$work"
