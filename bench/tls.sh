#!/usr/bin/env bash
# What TLS costs (docs/BENCHMARKS.md, "TLS"): the same load with [cluster] tls_* off and on,
# alternating plain and TLS each round, RUNS rounds (default 3), medians printed as a table:
#   - node direct: rl-bench -> one rl-node (token_bucket, 1M keys, 4 connections x 256
#     pipelined, 5 s closed loop); decisions/s and the node's CPU per decision;
#   - through the router: rl-bench -> rl-router -> rl-node, the router's connections to the
#     node mutual TLS; decisions/s, the router's and the node's CPU per decision.
# CPU per decision is the process's user+sys time (/proc/PID/stat utime + stime) over the
# run divided by the decisions of the run. Node on core 0, router and rl-bench on core 1
# (as bench/compare.sh). With TLS, rl-bench speaks TLS too (--tls-ca; and to the node, which
# wants a client certificate, --tls-cert/--tls-key). A throwaway CA and certificates (EC
# P-256) are made in a scratch directory with the openssl command. Builds Release first.
#   bench/tls.sh            (RUNS=3 by default)
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
dur=${DURATION:-5}
build_release
scratch
machine
echo "load before: $(uptime)"
echo "tree: $(tree_rev), $(openssl version)"

# The throwaway CA and one certificate for every member and rl-bench.
ossl() { openssl "$@" >/dev/null 2>&1; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/ca.key" \
    -out "$work/ca.pem" -days 2 -subj /CN=bench-ca
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/m.key" \
    -out "$work/m.csr" -subj /CN=member
ossl x509 -req -in "$work/m.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
    -out "$work/m.pem" -days 2
chmod 600 "$work/m.key" "$work/ca.key"

nport=$(free_port)
rport=$(free_port)
for mode in plain tls; do
    {
        echo "[cluster]"
        if [ $mode = tls ]; then
            echo "tls_cert_file = $work/m.pem"
            echo "tls_key_file = $work/m.key"
            echo "tls_ca_file = $work/ca.pem"
        fi
        one_node_conf
    } > "$work/$mode.conf"
done

# round MODE: a node and a router of MODE; prints
# "direct_dps node_ns_direct routed_dps router_ns node_ns_routed".
round() {
    local mode=$1 node router
    local direct=() routed=()
    trap bench_cleanup EXIT # this runs in a subshell: its processes end with it
    if [ "$mode" = tls ]; then
        direct=(--tls-ca "$work/ca.pem" --tls-cert "$work/m.pem" --tls-key "$work/m.key")
        routed=(--tls-ca "$work/ca.pem")
    fi
    start_pair "$bin" "$work/$mode.conf"
    warm_up "$bin" "${direct[@]}"  # the 1M keys exist before any measured run
    local out; out=$(measure_pair "$bin" "$dur")
    bench_cleanup
    echo "$out"
}
declare -A col
for i in $(seq 1 "$runs"); do
    for mode in plain tls; do
        read -r d nd rd rn nn < <(round $mode)
        echo "run $i $mode: direct $d/s (node $nd ns/decision) | routed $rd/s (router $rn ns, node $nn ns per decision)"
        col[$mode.d]+="$d "; col[$mode.nd]+="$nd "; col[$mode.rd]+="$rd "
        col[$mode.rn]+="$rn "; col[$mode.nn]+="$nn "
    done
done
med() { printf '%s\n' ${col[$1]} | median; }
ratio() { awk -v a="$(med tls.$1)" -v b="$(med plain.$1)" 'BEGIN {printf "%.3f", a/b}'; }
echo "load after: $(uptime)"
echo
printf '%-34s %14s %14s %10s\n' "medians of $runs runs" plain TLS TLS/plain
printf '%-34s %14.0f %14.0f %10s\n' "node direct: decisions/s" "$(med plain.d)" "$(med tls.d)" "$(ratio d)"
printf '%-34s %14.0f %14.0f %10s\n' "node direct: node ns CPU/decision" "$(med plain.nd)" "$(med tls.nd)" "$(ratio nd)"
printf '%-34s %14.0f %14.0f %10s\n' "via router: decisions/s" "$(med plain.rd)" "$(med tls.rd)" "$(ratio rd)"
printf '%-34s %14.0f %14.0f %10s\n' "via router: router ns CPU/decision" "$(med plain.rn)" "$(med tls.rn)" "$(ratio rn)"
printf '%-34s %14.0f %14.0f %10s\n' "via router: node ns CPU/decision" "$(med plain.nn)" "$(med tls.nn)" "$(ratio nn)"
