#!/usr/bin/env bash
# The RESP front (docs/RESP.md, docs/BENCHMARKS.md "RESP front"): decisions/s of
#   1. redis-benchmark sending CL.THROTTLE to the router's [router] resp listener (an
#      inline-limited gcra CHECK per command, forwarded to the node),
#   2. rl-bench sending binary CHECKs to the same router's binary listener (a configured
#      gcra rule with the same rate and burst),
#   2b. redis-benchmark sending RL.CHECK bench KEY to the resp listener (the configured rule of
#      2 through the RESP front: what the front costs, apart from the inline limit),
#   3. redis-benchmark sending EVALSHA of bench/redis_tb.lua (the usual Redis + Lua token
#      bucket) to a redis-server,
#   3b. the same with bench/redis_gcra.lua (a Redis + Lua GCRA taking CL.THROTTLE's
#      arguments: the like-for-like baseline of 1),
#   4. "pipe": redis-cli --pipe writing 100,000 CL.THROTTLE of one key (6 MB, more than a
#      connection's ring of 1,024 in flight) to the resp listener: seconds to the last reply
#      and commands a second (tests/resp test_deep_pipelines asserts the replies, not this),
# same machine, same run, alternating 1-2-3 in each round; 4 connections x 64 pipelined
# commands, 1M random keys. One node on core 0 (Redis too), the router (one worker) and the
# load generators on core 1, as bench/router_bench.sh. Medians of RUNS rounds (default 3).
#   bench/resp_bench.sh
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
build_release
command -v redis-benchmark >/dev/null && command -v redis-server >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
scratch
nport=$(free_port)
rport=$(free_port)
sport=$(free_port)
dport=$(free_port)
conns=${CONNS:-4}
pipe=${PIPE:-64}
n=${REQUESTS:-400000}
machine
echo "load: $(uptime)"
cat > "$work/r.conf" <<CONF
[cluster]
shards = 64
[router]
listen = 127.0.0.1:$rport
resp = 127.0.0.1:$sport
deadline = 200ms
workers = 1
[node n]
listen = 127.0.0.1:$nport
memory = 2g
[service bench]
limit = gcra 1000 per 1s burst 1000001
CONF
taskset -c 0 "$bin/rl-node" --config "$work/r.conf" --name n 2>>"$work/node.log" &
pids+=($!)
wait_port $nport
taskset -c 1 "$bin/rl-router" --config "$work/r.conf" 2>>"$work/router.log" &
pids+=($!)
wait_port $sport
taskset -c 0 redis-server --port $dport --save "" --appendonly no --daemonize no \
    --logfile "$work/redis.log" &
pids+=($!)
wait_port $dport
sha=$(redis-cli -p $dport SCRIPT LOAD "$(cat "$top/bench/redis_tb.lua")")
gsha=$(redis-cli -p $dport SCRIPT LOAD "$(cat "$top/bench/redis_gcra.lua")")
# the same limit both ways: 1000 per second, burst 1000001 (max_burst 1000000): all allowed
[ "$(redis-cli -p $sport CL.THROTTLE warm 1000000 1000 1 | head -1)" = 0 ]

rb() { # redis-benchmark's requests per second
    taskset -c 1 redis-benchmark -c $conns -P $pipe -n $n -r 1000000 -q "$@" 2>/dev/null |
        tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}
# 100,000 CL.THROTTLE of one key in raw RESP, for redis-cli --pipe
python3 -c '
import sys
c = b"*5\r\n$11\r\nCL.THROTTLE\r\n$4\r\npipe\r\n$1\r\n9\r\n$1\r\n1\r\n$4\r\n3600\r\n"
sys.stdout.buffer.write(c * 100000)' >"$work/pipe.resp"
pipe_secs() { # seconds redis-cli --pipe took, all 100,000 answered without error
    local t0 t1 out
    t0=$(date +%s.%N)
    out=$(taskset -c 1 redis-cli -p $sport --pipe <"$work/pipe.resp")
    t1=$(date +%s.%N)
    grep -q "errors: 0, replies: 100000" <<<"$out" || { echo "pipe: $out" >&2; return 1; }
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'
}
resp=(); bin_=(); lua=(); chk=(); pip=(); glua=()
for i in $(seq 1 "$runs"); do
    r1=$(rb -p $sport CL.THROTTLE 'k:__rand_int__' 1000000 1000 1)
    r2=$(taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$rport --service bench --keys 1000000 \
        --connections $conns --pipeline $pipe --requests $n --json | tail -1 | json decisions_per_s)
    r4=$(rb -p $sport RL.CHECK bench 'k:__rand_int__')
    r3=$(rb -p $dport EVALSHA "$sha" 1 'tb:__rand_int__' 1000 1000 1000 1)
    r6=$(rb -p $dport EVALSHA "$gsha" 1 'g:__rand_int__' 1000000 1000 1 1)
    r5=$(pipe_secs)
    resp+=("$r1"); bin_+=("$r2"); lua+=("$r3"); chk+=("$r4"); pip+=("$r5"); glua+=("$r6")
    echo "round $i: resp CL.THROTTLE $r1/s, binary CHECK $r2/s, resp RL.CHECK $r4/s, redis+lua $r3/s, redis+lua gcra $r6/s, pipe of 100,000 ${r5} s"
done
m1=$(printf '%s\n' "${resp[@]}" | median)
m2=$(printf '%s\n' "${bin_[@]}" | median)
m3=$(printf '%s\n' "${lua[@]}" | median)
m4=$(printf '%s\n' "${chk[@]}" | median)
m5=$(printf '%s\n' "${pip[@]}" | median)
m6=$(printf '%s\n' "${glua[@]}" | median)
echo "RESULT resp CL.THROTTLE median $m1/s; binary CHECK median $m2/s; resp RL.CHECK median $m4/s; redis+lua median $m3/s; resp/binary = $(awk -v a=$m1 -v b=$m2 'BEGIN {printf "%.2f", a/b}'); resp/redis+lua = $(awk -v a=$m1 -v b=$m3 'BEGIN {printf "%.2f", a/b}'); redis+lua gcra median $m6/s, resp/redis+lua gcra = $(awk -v a=$m1 -v b=$m6 'BEGIN {printf "%.2f", a/b}'); pipe of 100,000 median $m5 s ($(awk -v s=$m5 'BEGIN {printf "%.0f", 100000/s}')/s)"
grep -c "" "$work/router.log" >/dev/null
echo "router log warnings: $(grep -c warn "$work/router.log" || true)"
redis-cli -p $dport shutdown nosave >/dev/null 2>&1 || true
rm -rf "$work"
