#!/usr/bin/env bash
# Python client benchmark (clients/python): checks/s and p50/p99 latency through one
# rl-router to one rl-node on free loopback ports, for
#   sync   the blocking Client, one request at a time (latency per check)
#   many   the blocking Client's check_many, pipelined batches of 100 (latency per batch)
#   async  the asyncio client, 256 requests in flight on one connection (latency per check)
# and, in the same run against the same router, rl-bench (C) with 1 connection and
# pipeline 1, then pipeline 256. RUNS rounds (default 3), medians printed.
#   scripts/build.sh release && bench/python_client.sh     (DURATION=3 s per mode)
RUNS=${RUNS:-3}
source "$(dirname "$0")/lib.sh"
duration=${DURATION:-3}
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
for b in rl-node rl-router rl-bench; do
    [ -x "$bin/$b" ] || { echo "missing $bin/$b: run scripts/build.sh release" >&2; exit 1; }
done
scratch
nport=$(free_port)
rport=$(free_port)
while [ "$rport" = "$nport" ]; do rport=$(free_port); done
one_node_conf 1g "token_bucket 1000 per 1s" > "$work/c.conf"
"$bin/rl-node" --config "$work/c.conf" --name n --log-level warn 2>>"$work/node.log" &
pids+=($!)
"$bin/rl-router" --config "$work/c.conf" --log-level warn 2>>"$work/router.log" &
pids+=($!)
wait_port $nport
wait_port $rport
sleep 0.3
machine
echo "python: $("$py" --version 2>&1), msgpack $("$py" -c 'import msgpack; print(msgpack.version)')"
export PYTHONPATH=$top/clients/python/src
pyrun() { "$py" "$top/bench/python_client.py" "$rport" "$1" "$duration"; }
cbench() { # PIPELINE
    "$bin/rl-bench" --target 127.0.0.1:$rport --service bench --keys 1000000 \
        --connections 1 --pipeline "$1" --duration "$duration" --json | tail -1
}
pyrun sync > /dev/null  # warm-up
declare -A tput p50 p99
modes=(sync many async c1 c256)
for i in $(seq 1 "$runs"); do
    line="run $i:"
    for m in "${modes[@]}"; do
        case $m in
        c1) o=$(cbench 1) ;;
        c256) o=$(cbench 256) ;;
        *) o=$(pyrun "$m") ;;
        esac
        t=$(echo "$o" | json checks_per_s || true); [ -n "$t" ] || t=$(echo "$o" | json decisions_per_s)
        tput[$m]+="$t "; p50[$m]+="$(echo "$o" | json p50_us) "; p99[$m]+="$(echo "$o" | json p99_us) "
        line+=" $m ${t}/s"
    done
    echo "$line"
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
label() {
    case $1 in
    sync) echo "python sync, 1 at a time        " ;;
    many) echo "python sync check_many, batch 100" ;;
    async) echo "python asyncio, 256 in flight   " ;;
    c1) echo "rl-bench (C), 1 conn, pipeline 1" ;;
    c256) echo "rl-bench (C), 1 conn, pipeline 256" ;;
    esac
}
echo "RESULT medians of $runs runs of ${duration}s (latency: per check; check_many: per batch of 100)"
for m in "${modes[@]}"; do
    printf 'RESULT %s %9s checks/s  p50 %6s us  p99 %6s us\n' "$(label $m)" \
        "$(med "${tput[$m]}")" "$(med "${p50[$m]}")" "$(med "${p99[$m]}")"
done
