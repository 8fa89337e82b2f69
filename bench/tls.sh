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
# bench/tls.sh flood: CHECK latency through a TLS router during a handshake flood
# (docs/BENCHMARKS.md, "Under abuse"): rl-bench at RATE CHECKs/s (default 1500, open loop,
# 4 TLS connections, 8 s) through the router (2 workers, the node behind it over mutual TLS)
# once alone ("quiet") and once while one process replays one ClientHello (made once: no
# crypto on its side) on up to 100 connections at a time, each closed (RST) as soon as the
# router answers or closes it ("flood"); prints the CHECK p50/p99 and FAIL_OPEN answers
# (router deadline 50 ms) and the ClientHellos answered a second. BIN=/path/to/build runs
# another build's rl-node and rl-router (an older revision: "before"); no build is made.
source "$(dirname "$0")/lib.sh"
runs=${RUNS:-3}
dur=${DURATION:-5}
[ "${1:-}" = flood ] || build_release
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
if [ "${1:-}" = flood ]; then
    b=${BIN:-$bin}
    rate=${RATE:-1500}
    echo "binaries: $b"
    { printf '[cluster]\ntls_cert_file = %s\ntls_key_file = %s\ntls_ca_file = %s\n' \
          "$work/m.pem" "$work/m.key" "$work/ca.pem"
      one_node_conf | sed 's/^deadline = .*/deadline = 50ms/'; } > "$work/flood.conf"
    cat > "$work/flood.py" <<'PY'
import selectors, socket, ssl, struct, sys, time
port, secs = int(sys.argv[1]), float(sys.argv[2])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
o = ctx.wrap_bio(inc, out)
try:
    o.do_handshake()
except ssl.SSLWantReadError:
    pass
hello = out.read()
sel = selectors.DefaultSelector()
answered = refused = 0
end = time.monotonic() + secs
def one():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.connect(("127.0.0.1", port))
    s.send(hello)
    sel.register(s, selectors.EVENT_READ)
for _ in range(100):
    one()
while time.monotonic() < end:
    for key, _ in sel.select(0.1):
        s = key.fileobj
        try:
            got = s.recv(65536)
        except OSError:
            got = b""
        if got:
            answered += 1
        else:
            refused += 1
        sel.unregister(s)
        s.close()
        one()
print("FLOOD answered_per_s=%.0f closed_unanswered_per_s=%.0f" % (answered / secs, refused / secs))
PY
    declare -A fcol
    for i in $(seq 1 "$runs"); do
        for side in quiet flood; do
            (
                trap bench_cleanup EXIT
                taskset -c 0 "$b/rl-node" --config "$work/flood.conf" --name n 2>>"$work/node.log" &
                pids+=($!)
                "$b/rl-router" --config "$work/flood.conf" --workers 2 2>>"$work/router.log" &
                pids+=($!)
                wait_port $nport; wait_port $rport; sleep 0.3
                [ $side = quiet ] || { python3 "$work/flood.py" $rport 9 > "$work/flood.out" 2>&1 & pids+=($!); sleep 0.5; }
                out=$("$b/rl-bench" --target 127.0.0.1:$rport --service bench --keys 100000 \
                    --connections 4 --rate "$rate" --duration 8 --json --tls-ca "$work/ca.pem" | tail -1)
                [ $side = quiet ] || { wait "${pids[-1]}" 2>/dev/null; cat "$work/flood.out" >&2; }
                echo "$(json p50_us <<<"$out") $(json p99_us <<<"$out") $(json fail_open <<<"$out") $(json decisions <<<"$out") $(sed -n 's/^FLOOD answered_per_s=\([0-9]*\).*/\1/p' "$work/flood.out" 2>/dev/null)"
            ) > "$work/r.out"
            read -r p50 p99 fo dec hs < "$work/r.out"
            echo "RESULT $side run $i: CHECK p50 ${p50} us, p99 ${p99} us, FAIL_OPEN ${fo} of ${dec}; ClientHellos answered ${hs:-0}/s"
            fcol[$side.p50]+="$p50 "; fcol[$side.p99]+="$p99 "; fcol[$side.fo]+="$fo "; fcol[$side.hs]+="${hs:-0} "
            rm -f "$work/flood.out"
        done
    done
    fmed() { printf '%s\n' ${fcol[$1]} | median; }
    echo "load after: $(uptime)"
    for side in quiet flood; do
        echo "medians $side: CHECK p50 $(fmed $side.p50) us, p99 $(fmed $side.p99) us, FAIL_OPEN $(fmed $side.fo); ClientHellos answered $(fmed $side.hs)/s"
    done
    exit 0
fi
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
