#!/usr/bin/env bash
# nginx in front of a trivial backend, without and with the Lua rate-limit check
# (clients/lua/ratelimiter.lua asking a real rl-router and rl-node), same machine, same run:
#   bench/nginx.sh            RUNS=3 DURATION=5 CONNS=32 THREADS=1 by default
# Each run measures /plain/ (proxy only) then /api/ (access_by_lua check + proxy) with wrk
# (Debian package wrk, keep-alive); prints each run and the medians of requests/s, p50, p99.
# nginx is one process (master_process off, as examples/nginx/nginx.conf.in); the limit is
# set high enough that every request is ALLOWED (the full path: headers, backend).
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
command -v wrk >/dev/null || { echo "bench/nginx.sh: wrk is needed (scripts/deps.sh)" >&2; exit 2; }
[ -x "$bin/rl-router" ] || { echo "bench/nginx.sh: build first (scripts/build.sh release)" >&2; exit 2; }
work=$(mktemp -d)
trap 'bench_cleanup; rm -rf "$work"' EXIT
node_port=$(free_port); router_port=$(free_port); ng_port=$(free_port); be_port=$(free_port)
cat > "$work/cluster.conf" <<CONF
[cluster]
name = nginxbench
shards = 64
[router]
listen = 127.0.0.1:$router_port
[node a]
listen = 127.0.0.1:$node_port
[service api]
limit = fixed_window 4000000000 per 1h
CONF
"$bin/rl-node" --config "$work/cluster.conf" --name a --log-level warn >"$work/node.log" 2>&1 &
pids+=($!)
"$bin/rl-router" --config "$work/cluster.conf" --log-level warn >"$work/router.log" 2>&1 &
pids+=($!)
wait_port "$node_port" && wait_port "$router_port" || { cat "$work/node.log" "$work/router.log" >&2; exit 1; }
conf=$(bash "$top/examples/nginx/render.sh" "$work/nginx" "$ng_port" "$be_port" "$router_port" 200)
env -u RL_TOKEN nginx -p "$work/nginx" -c "$conf" -e "$work/nginx/error.log" >"$work/nginx.out" 2>&1 &
pids+=($!)
wait_port "$ng_port" || { cat "$work/nginx.out" "$work/nginx/error.log" >&2; exit 1; }
machine
echo "nginx $(nginx -v 2>&1 | sed 's/.*\///'), wrk -t$THREADS -c$CONNS -d${DURATION}s --latency, RUNS=$runs"
# The set-up, checked before measuring: /api/ is decided by the router (RateLimit header).
exec 3<>"/dev/tcp/127.0.0.1/$ng_port"
printf 'GET /api/ HTTP/1.0\r\nX-User: bench-probe\r\n\r\n' >&3
grep -qi '^RateLimit: "api";r=' <&3 || { echo "bench/nginx.sh: /api/ is not rate-limited" >&2; exit 1; }
exec 3<&-
# to_ms VALUE: wrk's "1.23ms", "456.00us", "1.10s" in milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { if (v ~ /us$/) { sub(/us$/, "", v); print v / 1000 }
                               else if (v ~ /ms$/) { sub(/ms$/, "", v); print v + 0 }
                               else { sub(/s$/, "", v); print v * 1000 } }'; }
run_wrk() { # PATH -> "rps p50_ms p99_ms non2xx"
    local out
    out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -H "X-User: bench" \
          "http://127.0.0.1:$ng_port$1")
    local rps p50 p99 bad
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
    p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
    bad=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")
    echo "$rps $p50 $p99 ${bad:-0}"
}
: >"$work/plain"; : >"$work/lua"
for i in $(seq 1 "$runs"); do
    for kind in plain lua; do
        path=/plain/; [ "$kind" = lua ] && path=/api/
        read -r rps p50 p99 bad < <(run_wrk "$path")
        echo "run $i $kind: $rps req/s, p50 $p50 ms, p99 $p99 ms, non-2xx $bad"
        [ "$bad" = 0 ] || { echo "bench/nginx.sh: $bad non-2xx answers on $path" >&2; tail "$work/nginx/error.log" >&2; exit 1; }
        echo "$rps $p50 $p99" >>"$work/$kind"
    done
done
for kind in plain lua; do
    rps=$(awk '{print $1}' "$work/$kind" | median)
    p50=$(awk '{print $2}' "$work/$kind" | median)
    p99=$(awk '{print $3}' "$work/$kind" | median)
    echo "RESULT nginx_$kind rps=$rps p50_ms=$p50 p99_ms=$p99"
done
echo "router log warnings: $(grep -c -i warn "$work/router.log" || true); nginx error.log lines: $(wc -l <"$work/nginx/error.log")"
