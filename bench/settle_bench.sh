#!/usr/bin/env bash
# ADJUST and RELEASE against CHECK through a real router (docs/BENCHMARKS.md, "Router:
# ADJUST and RELEASE against CHECK"): the CPU each request costs the router and the node, and
# the requests per second, for the same closed-loop load of each op in turn (rl-bench --op).
# Not for the limiter alone (bench/limiter_bench.c settle does that, without the network).
#   check      CHECK of cost 1, [service bench] (token_bucket, never refused)
#   adjust+1   ADJUST charging 1 on the same keys
#   adjust-1   ADJUST refunding 1 on the same keys
#   check-c    CHECK of cost 1, [service conc] (concurrency 10000 lease 10m: takes a slot)
#   release    RELEASE of 1 on the same keys (gives those slots back)
# 100,000 users of each service created first; each run measures the five in that order,
# DURATION seconds each, 4 connections x 256 pipelined; medians of RUNS runs.
# One node on core 0; the router and rl-bench on core 1 (the router's figures are its own
# CPU, from /proc, not rl-bench's). No [client] sections: anyone may refund.
#   bench/settle_bench.sh   (RUNS=5, DURATION=3)
# BIN=DIR measures the rl-node, rl-router, rl-bench and rl-cli built in DIR instead of this
# tree's build/ (not rebuilt): an older commit's, for a before/after in the same session.
source "$(dirname "$0")/lib.sh"
dur=${DURATION:-3}
keys=100000
if [ -n "${BIN:-}" ]; then
    bin=$BIN
else
    build_release
fi
echo "binaries: $bin"
scratch
nport=$(free_port)
rport=$(free_port)
machine
[ -n "${BIN:-}" ] || echo "commit: $(tree_rev)"
echo "load: $(uptime)"
cat > "$work/s.conf" <<CONF
[router]
listen = 127.0.0.1:$rport
deadline = 200ms
[node n]
listen = 127.0.0.1:$nport
memory = 1g
[service bench]
limit = token_bucket 1000000 per 1s
[service conc]
limit = concurrency 10000 lease 10m
CONF
start_pair "$bin" "$work/s.conf"
for svc in bench conc; do
    taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$nport --service $svc --keys $keys \
        --sequential --requests $keys --connections 4 --pipeline 256 --json > /dev/null
done

names=(check adjust+1 adjust-1 check-c release)
args=("--service bench" "--service bench --op adjust --delta 1"
    "--service bench --op adjust --delta -1" "--service conc" "--service conc --op release")
# one OP_INDEX: "requests/s router_ns node_ns answered_other" for DURATION seconds
one() {
    local out n0 n1 r0 r1 n
    n0=$(ticks "$node"); r0=$(ticks "$router")
    # shellcheck disable=SC2086
    out=$(taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$rport --keys $keys \
        --connections 4 --pipeline 256 --duration "$dur" --json ${args[$1]} | tail -1)
    n1=$(ticks "$node"); r1=$(ticks "$router")
    n=$(echo "$out" | json decisions)
    echo "$(echo "$out" | json decisions_per_s) $(ns_per $((r1 - r0)) "$n") $(ns_per $((n1 - n0)) "$n")" \
        "$(( $(echo "$out" | json limited) + $(echo "$out" | json fail_open) + $(echo "$out" | json fail_closed) + $(echo "$out" | json errors) ))"
}
declare -A rate rns nns
for i in $(seq 1 "$runs"); do
    line="run $i:"
    for k in "${!names[@]}"; do
        read -r d r n other < <(one "$k")
        rate[$k]+="$d "; rns[$k]+="$r "; nns[$k]+="$n "
        line+=" ${names[$k]} ${d}/s router ${r} ns node ${n} ns$([ "$other" -eq 0 ] || echo " ($other not ALLOWED)");"
    done
    echo "$line"
done
med() { tr ' ' '\n' | grep . | median; }
printf '\n%-10s %14s %16s %16s\n' "op" "requests/s" "router ns/req" "node ns/req"
for k in "${!names[@]}"; do
    printf '%-10s %14.0f %16.0f %16.0f\n' "${names[$k]}" "$(echo "${rate[$k]}" | med)" \
        "$(echo "${rns[$k]}" | med)" "$(echo "${nns[$k]}" | med)"
done
echo "node STATS: $("$bin/rl-cli" --target 127.0.0.1:$nport stats | grep -E '^(adjusts|releases|releases_late) ' | tr '\n' ' ')"
