#!/usr/bin/env bash
# CPU per decision of the router and of the node for the same requests (docs/BENCHMARKS.md,
# "Router and fronts: CPU per decision"), for a base revision (BASE, default HEAD~1, built in
# a scratch worktree) and this tree's Release build, alternating base and current each round:
#   binary  rl-bench through the router, 8 connections x 64 pipelined, 1M keys (created on the
#           node first), 5 s: router ns and node ns per decision (/proc utime + stime), and
#           router / node (issue 35's target: <= 0.5);
#   resp    redis-benchmark CL.THROTTLE (inline gcra, 1M random keys), 4 connections x 64
#           pipelined, REQUESTS commands, against rl-bench's binary CHECKs of the same limit
#           (a gcra rule) with the same load: router + node ns per decision of each, resp / binary
#           (target: <= 1.3);
#   grpc    h2load ShouldRateLimit (one descriptor, envoy_config), 8 connections x 64 streams,
#           REQUESTS calls, against binary CHECKs with the same load (one key, as bench/rls.sh):
#           router + node ns per decision of each, grpc / binary (target: <= 1.5).
# Node on core 0; router (one worker) and the load generators on core 1. Medians of RUNS rounds
# (default 3) as RESULT lines, the machine's load before and after.
#   bench/router_cpu.sh [BASE]      ONLY="binary resp grpc" picks the parts
source "$(dirname "$0")/lib.sh"
base_rev=${1:-${BASE:-HEAD~1}}
runs=${RUNS:-3}
only=${ONLY:-binary resp grpc}
nreq=${REQUESTS:-400000}
build_release
command -v redis-benchmark >/dev/null || { echo "router_cpu.sh: redis-benchmark is missing (redis-tools)" >&2; exit 2; }
command -v h2load >/dev/null || { echo "router_cpu.sh: h2load is missing (nghttp2-client)" >&2; exit 2; }
work=$(mktemp -d)
trap 'bench_cleanup; git -C "$top" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$top" worktree add --detach -q "$work/src" "$base_rev"
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target rl-node rl-router rl-bench >/dev/null
machine
echo "base: $(git -C "$top" rev-parse --short "$base_rev"), current: $(tree_rev)"
echo "load before: $(uptime)"
rls_fixture

# ports: fresh ports for the next start (another tenant may take one meanwhile: start
# retries with new ones).
ports() { nport=$(free_port); rport=$(free_port); sport=$(free_port); gport=$(free_port); }
# start BIN CONFFN PORT: writes the config (CONFFN, a function, to $work/x.conf) on fresh ports,
# starts node n on core 0 and the router on core 1, waits for the router's PORT variable's
# port; sets node, router. Three tries.
start() {
    local try
    for try in 1 2 3; do
        ports
        "$2" > "$work/x.conf"
        taskset -c 0 "$1/rl-node" --config "$work/x.conf" --name n >/dev/null 2>>"$work/node.log" &
        node=$!; pids+=($node)
        taskset -c 1 "$1/rl-router" --config "$work/x.conf" >/dev/null 2>>"$work/router.log" &
        router=$!; pids+=($router)
        if wait_port $nport 2>/dev/null && wait_port $rport 2>/dev/null &&
            wait_port "${!3}" 2>/dev/null; then
            sleep 0.3
            return 0
        fi
        bench_cleanup
    done
    echo "router_cpu.sh: the node or the router did not start (logs in $work)" >&2
    return 1
}
# cpu N CMD...: runs CMD (its output dropped), then prints "router_ns node_ns" per decision
# for N decisions.
cpu() {
    local n=$1 r0 n0
    shift
    r0=$(ticks $router); n0=$(ticks $node)
    "$@" > "$work/out" 2>&1
    echo "$(ns_per $(($(ticks $router) - r0)) "$n") $(ns_per $(($(ticks $node) - n0)) "$n")"
}
resp_conf() {
    cat <<CONF
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
}
grpc_conf() {
    cat <<CONF
[cluster]
envoy_config = edge.yaml
[router]
listen = 127.0.0.1:$rport
rls = 127.0.0.1:$gport
deadline = 200ms
workers = 1
[node n]
listen = 127.0.0.1:$nport
memory = 1g
[service bench]
limit = fixed_window 4000000000 per 1h
CONF
}
binary_round() { # BIN: "router_ns node_ns router/node"
    local b=$1 out dec r0 n0 rn nn
    start "$b" one_node_conf rport
    warm_up "$b"
    r0=$(ticks $router); n0=$(ticks $node)
    out=$(taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$rport --service bench --keys 1000000 \
        --connections 8 --pipeline 64 --duration 5 --json | tail -1)
    dec=$(echo "$out" | json decisions)
    rn=$(ns_per $(($(ticks $router) - r0)) "$dec"); nn=$(ns_per $(($(ticks $node) - n0)) "$dec")
    bench_cleanup
    echo "$rn $nn $(awk -v a=$rn -v b=$nn 'BEGIN {printf "%.2f", a/b}')"
}
resp_round() { # BIN: "resp_sum binary_sum resp/binary resp_router binary_router"
    local b=$1 rr rn br bn
    start "$b" resp_conf sport
    read -r rr rn < <(cpu "$nreq" taskset -c 1 redis-benchmark -p $sport -c 4 -P 64 -n "$nreq" \
        -r 1000000 -q CL.THROTTLE 'k:__rand_int__' 1000000 1000 1)
    read -r br bn < <(cpu "$nreq" taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$rport \
        --service bench --keys 1000000 --connections 4 --pipeline 64 --requests "$nreq" --json)
    bench_cleanup
    echo "$((rr + rn)) $((br + bn)) $(awk -v a=$((rr + rn)) -v b=$((br + bn)) 'BEGIN {printf "%.2f", a/b}') $rr $br"
}
grpc_round() { # BIN: "grpc_sum binary_sum grpc/binary grpc_router binary_router"
    local b=$1 gr gn br bn
    start "$b" grpc_conf gport
    read -r gr gn < <(cpu "$nreq" taskset -c 1 h2load -c 8 -m 64 -t 1 -n "$nreq" -d "$work/req.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$gport/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
    grep -q "$nreq succeeded" "$work/out" || { echo "router_cpu.sh: h2load: not every call succeeded" >&2; cat "$work/out" >&2; exit 1; }
    read -r br bn < <(cpu "$nreq" taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$rport \
        --service bench --keys 1 --connections 8 --pipeline 64 --requests "$nreq" --json)
    bench_cleanup
    echo "$((gr + gn)) $((br + bn)) $(awk -v a=$((gr + gn)) -v b=$((br + bn)) 'BEGIN {printf "%.2f", a/b}') $gr $br"
}

declare -A col
for i in $(seq 1 "$runs"); do
    for which in base current; do
        b=$bin; [ $which = base ] && b=$work/build
        for part in $only; do
            read -r -a v < <(${part}_round "$b")
            echo "round $i $which $part: ${v[*]}"
            for k in "${!v[@]}"; do col[$which.$part.$k]+="${v[$k]} "; done
        done
    done
done
echo "load after: $(uptime)"
med() { printf '%s\n' ${col[$1]} | median; }
for which in base current; do
    for part in $only; do
        case $part in
        binary) echo "RESULT $which binary 8x64: router $(med $which.binary.0) ns, node $(med $which.binary.1) ns per decision, router/node $(med $which.binary.2) (median of the rounds' ratios)" ;;
        resp) echo "RESULT $which resp: CL.THROTTLE router+node $(med $which.resp.0) ns (router $(med $which.resp.3)), binary $(med $which.resp.1) ns (router $(med $which.resp.4)), resp/binary $(med $which.resp.2)" ;;
        grpc) echo "RESULT $which grpc: ShouldRateLimit router+node $(med $which.grpc.0) ns (router $(med $which.grpc.3)), binary $(med $which.grpc.1) ns (router $(med $which.grpc.4)), grpc/binary $(med $which.grpc.2)" ;;
        esac
    done
done
