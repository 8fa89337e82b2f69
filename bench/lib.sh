# Shared helpers of the bench/ scripts (sourced, not run).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$top/build
runs=${RUNS:-5}
pids=()
bench_cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
trap bench_cleanup EXIT

# json FIELD < line: a number from rl-bench's --json summary.
json() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
# median of the numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# wait_port PORT: until something accepts on 127.0.0.1:PORT.
wait_port() {
    for _ in $(seq 1 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on $1" >&2
    return 1
}
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 20000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo $p; return; }
    done
}
# low_port: a port in 20000..31999 nothing listens on, below Linux's ephemeral range (32768..)
# so that no outgoing connection of another process holds it (free_port can pick one that does).
low_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo $p; return; }
    done
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
machine() {
    echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
}

# build_release: the Release build of this tree (build/), quietly.
build_release() { bash "$top/scripts/build.sh" release >/dev/null; }
# scratch: a new temporary directory in $work, removed (after bench_cleanup) at exit.
scratch() {
    work=$(mktemp -d)
    trap 'bench_cleanup; rm -rf "$work"' EXIT
}
# tree_rev: the commit measured, and whether the work tree differs from it.
tree_rev() {
    echo "$(git -C "$top" rev-parse --short HEAD)$(git -C "$top" diff --quiet || echo ' + uncommitted changes')"
}
# ticks PID: the CPU time PID has used so far (utime + stime from /proc, in clock ticks).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# ns_per TICKS N: nanoseconds of CPU per item, TICKS clock ticks spent on N items.
ns_per() { awk -v t="$1" -v n="$2" -v hz="$hz" 'BEGIN {printf "%.0f", t / hz * 1e9 / n}'; }
# one_node_conf [MEMORY] [LIMIT]: the [router] on $rport and one [node n] on $nport, with
# [service bench] (default: memory 4g, token_bucket 100 per 1m), on stdout; no client may refund
# ([clients] adjust = no), so the router's deny cache holds refusals as before ADJUST.
one_node_conf() {
    cat <<CONF
[router]
listen = 127.0.0.1:$rport
deadline = 200ms
[clients]
adjust = no
[node n]
listen = 127.0.0.1:$nport
memory = ${1:-4g}
[service bench]
limit = ${2:-token_bucket 100 per 1m}
CONF
}
# start_pair BIN CONF: node n on core 0 and the router on core 1, from the build directory
# BIN with CONF (logs in $work); sets $node and $router, waits for $nport and $rport.
start_pair() {
    taskset -c 0 "$1/rl-node" --config "$2" --name n 2>>"$work/node.log" &
    node=$!; pids+=($node)
    taskset -c 1 "$1/rl-router" --config "$2" 2>>"$work/router.log" &
    router=$!; pids+=($router)
    wait_port $nport; wait_port $rport; sleep 0.3
}
# warm_up BIN [ARGS...]: rl-bench (core 1) creates the 1M keys of [service bench] on the
# node ($nport) before anything is measured; ARGS go to rl-bench (TLS options).
warm_up() {
    local b=$1
    shift
    taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$nport --service bench --keys 1000000 \
        --sequential --requests 1000000 --connections 4 --pipeline 256 --json "$@" > /dev/null
}
# closed_loop BIN PORT SECONDS [ARGS...]: one closed-loop run of BIN's rl-bench (core 1) on
# [service bench], 1M keys, 4 connections x 256 pipelined; prints "decisions/s decisions".
closed_loop() {
    local b=$1 port=$2 secs=$3 out
    shift 3
    out=$(taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$port --service bench --keys 1000000 \
        --connections 4 --pipeline 256 --duration "$secs" --json "$@" | tail -1)
    echo "$(echo "$out" | json decisions_per_s) $(echo "$out" | json decisions)"
}
# measure_pair BIN SECONDS: with start_pair's $node and $router up, a closed_loop straight
# to the node, then one through the router (rl-bench options from the arrays direct and
# routed, when set); prints "direct_dps node_ns_direct routed_dps router_ns node_ns_routed"
# (CPU per decision from ticks).
measure_pair() {
    local b=$1 secs=$2 n0 n1 r0 r1 d dd rd rdd
    n0=$(ticks $node); read -r d dd < <(closed_loop "$b" $nport "$secs" "${direct[@]}")
    n1=$(ticks $node)
    local nd; nd=$(ns_per $((n1 - n0)) "$dd")
    n0=$(ticks $node); r0=$(ticks $router)
    read -r rd rdd < <(closed_loop "$b" $rport "$secs" "${routed[@]}")
    n1=$(ticks $node); r1=$(ticks $router)
    local rn nn; rn=$(ns_per $((r1 - r0)) "$rdd"); nn=$(ns_per $((n1 - n0)) "$rdd")
    echo "$d $nd $rd $rn $nn"
}

# rls_fixture: in $work, edge.yaml (domain edge, descriptor k, a limit never reached:
# 4,000,000,000 an hour) and req.bin (RateLimitRequest{domain: "edge", descriptors:
# [{entries: [{key: "k", value: "v"}]}]} behind gRPC's 5-byte prefix, not compressed, length
# 16), what the gRPC benchmarks send with h2load.
rls_fixture() {
    printf '\x00\x00\x00\x00\x10\x0a\x04edge\x12\x08\x0a\x06\x0a\x01k\x12\x01v' > "$work/req.bin"
    cat > "$work/edge.yaml" <<YAML
domain: edge
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 4000000000
YAML
}
