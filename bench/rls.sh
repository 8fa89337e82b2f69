#!/usr/bin/env bash
# Envoy's ShouldRateLimit through rl-router (docs/BENCHMARKS.md, "gRPC rate limit service"):
# decisions per second of
#   grpc    h2load POSTing one prebuilt gRPC-framed RateLimitRequest (one descriptor) to the
#           router's [router] rls port, HTTP/2 h2c, content-type application/grpc, te: trailers;
#   binary  rl-bench sending CHECKs of the binary protocol to the same router (same node);
#   redis   what envoyproxy/ratelimit asks of Redis per decision with its fixed window:
#           INCRBY key 1 + EXPIRE key 3600, pipelined (redis-cli --pipe), no service between.
# All three count one key in a fixed window whose limit is never reached, with 8
# connections x 64 requests in flight (redis: one connection, everything pipelined).
# Alternating grpc, binary, redis in each run; medians of RUNS runs; ratios; CPU per decision
# of the router, and of router + node together (their /proc ticks over each measure).
# 2 cores: node (and redis-server) on core 0, router and the load generators on core 1.
#   bench/rls.sh            (RUNS=3, DURATION=3 seconds per measure, REDIS_PAIRS=400000)
# BIN=DIR measures the rl-node, rl-router and rl-bench built in DIR instead of this tree's
# build/ (not rebuilt): an older commit's, for a before/after in the same session.
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
dur=${DURATION:-3}
pairs=${REDIS_PAIRS:-400000}
if [ -n "${BIN:-}" ]; then
    bin=$BIN
else
    build_release
fi
echo "binaries: $bin"
need=()
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || need+=(redis-server redis-tools)
if [ ${#need[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
scratch
nport=$(free_port)
rport=$(free_port)
gport=$(free_port)
mport=$(free_port)
xport=$(free_port)
machine
echo "load: $(uptime)"

rls_fixture
cat > "$work/r.conf" <<CONF
[cluster]
envoy_config = edge.yaml
[router]
listen = 127.0.0.1:$rport
rls = 127.0.0.1:$gport
metrics = 127.0.0.1:$mport
deadline = 200ms
[node n]
listen = 127.0.0.1:$nport
memory = 1g
[service bench]
limit = fixed_window 4000000000 per 1h
CONF
# upstream's Redis commands for one decision: INCRBY PREFIX+domain_key_value_+window, EXPIRE
/usr/bin/python3 - "$work/redis.pipe" "$pairs" <<'PY'
import sys
key = b"edge_k_v_1764028800"
cmd = lambda *a: b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)
pair = cmd(b"INCRBY", key, b"1") + cmd(b"EXPIRE", key, b"3600")
with open(sys.argv[1], "wb") as f:
    f.write(pair * int(sys.argv[2]))
PY

taskset -c 0 "$bin/rl-node" --config "$work/r.conf" --name n 2>>"$work/node.log" &
pids+=($!)
taskset -c 1 "$bin/rl-router" --config "$work/r.conf" 2>>"$work/router.log" &
pids+=($!)
taskset -c 0 redis-server --port "$xport" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --logfile "$work/redis.log" &
pids+=($!)
wait_port $nport
wait_port $rport
wait_port $gport
wait_port $xport
sleep 0.3

rls_ok() { # calls the router answered OK so far
    curl -s "http://127.0.0.1:$mport/metrics" |
        awk '/^rl_router_rls_calls_total\{result="ok"\}/ {print $2}'
}
grpc() { # decisions/s of DURATION seconds of h2load
    local before after out
    before=$(rls_ok)
    out=$(taskset -c 1 h2load -c 8 -m 64 -t 1 -D "$1" -d "$work/req.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$gport/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
    after=$(rls_ok)
    # every request h2load counted must be a call the router answered OK (grpc-status 0)
    local done
    done=$(echo "$out" | sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p')
    if [ -z "$done" ] || [ "$done" -eq 0 ] || [ "$(awk -v a="$after" -v b="$before" 'BEGIN {print a - b}')" -lt "$done" ]; then
        echo "rls.sh: h2load: $done succeeded but the router answered $after - $before OK" >&2
        echo "$out" >&2
        exit 1
    fi
    echo "$out" | sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p'
    echo "$out" | awk '/^time for request:/ {print $4, $5, $6}' >&2
}
binary() {
    taskset -c 1 "$bin/rl-bench" --target "127.0.0.1:$rport" --service bench --keys 1 \
        --connections 8 --pipeline 64 --duration "$1" --json | tail -1 | json decisions_per_s
}
redis() {
    redis-cli -p "$xport" DEL edge_k_v_1764028800 >/dev/null
    local t0 t1
    t0=$(date +%s%N)
    taskset -c 1 redis-cli -p "$xport" --pipe < "$work/redis.pipe" > "$work/pipe.out"
    t1=$(date +%s%N)
    grep -q "errors: 0, replies: $((2 * pairs))" "$work/pipe.out" || { cat "$work/pipe.out" >&2; exit 1; }
    [ "$(redis-cli -p "$xport" GET edge_k_v_1764028800)" = "$pairs" ] || exit 1
    awk -v n="$pairs" -v ns=$((t1 - t0)) 'BEGIN {printf "%.0f", n / ns * 1e9}'
}

router_pid=${pids[1]}
node_pid=${pids[0]}
per_decision() { # router CPU microseconds per decision: TICKS DECISIONS/S
    awk -v t="$1" -v hz="$hz" -v r="$2" -v d="$dur" 'BEGIN {printf "%.2f", t / hz * 1e6 / (r * d)}'
}
grpc 1 >/dev/null 2>&1
binary 1 >/dev/null
g=(); b=(); r=(); gc=(); bc=(); gt=(); bt=()
for i in $(seq 1 "$runs"); do
    c0=$(ticks "$router_pid"); t0=$(( $(ticks "$node_pid") + c0 ))
    g+=("$(grpc "$dur" 2>"$work/lat")")
    c1=$(ticks "$router_pid"); t1=$(( $(ticks "$node_pid") + c1 ))
    glat=$(cat "$work/lat")
    b+=("$(binary "$dur")")
    c2=$(ticks "$router_pid"); t2=$(( $(ticks "$node_pid") + c2 ))
    r+=("$(redis)")
    gc+=("$(per_decision $((c1 - c0)) "${g[-1]}")")
    bc+=("$(per_decision $((c2 - c1)) "${b[-1]}")")
    gt+=("$(per_decision $((t1 - t0)) "${g[-1]}")")
    bt+=("$(per_decision $((t2 - t1)) "${b[-1]}")")
    echo "run $i: grpc ${g[-1]}/s (router ${gc[-1]} us CPU each, router+node ${gt[-1]}; h2load min max mean $glat), binary ${b[-1]}/s (router ${bc[-1]} us CPU each, router+node ${bt[-1]}), redis ${r[-1]}/s"
done
mg=$(printf '%s\n' "${g[@]}" | median)
mb=$(printf '%s\n' "${b[@]}" | median)
mr=$(printf '%s\n' "${r[@]}" | median)
mgc=$(printf '%s\n' "${gc[@]}" | median)
mbc=$(printf '%s\n' "${bc[@]}" | median)
mgt=$(printf '%s\n' "${gt[@]}" | median)
mbt=$(printf '%s\n' "${bt[@]}" | median)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
printf '\n%-54s %12s %8s %18s\n' "path (one key, fixed window, medians of $runs runs)" "decisions/s" "vs grpc" "router CPU us each"
printf '%-54s %12.0f %8s %18s\n' "gRPC ShouldRateLimit via rl-router (h2load)" "$mg" "1.00" "$mgc"
printf '%-54s %12.0f %8s %18s\n' "binary CHECK via rl-router (rl-bench)" "$mb" "$(ratio "$mb" "$mg")" "$mbc"
printf '%-54s %12.0f %8s %18s\n' "Redis INCRBY+EXPIRE pipelined (upstream's counting)" "$mr" "$(ratio "$mr" "$mg")" "-"
echo "RESULT rls: grpc $mg/s, binary $mb/s, redis $mr/s; grpc/binary $(ratio "$mg" "$mb"), grpc/redis $(ratio "$mg" "$mr"); router CPU per decision grpc $mgc us, binary $mbc us; router+node grpc $mgt us, binary $mbt us, grpc/binary $(ratio "$mgt" "$mbt")"
bench_cleanup
rm -rf "$work"
