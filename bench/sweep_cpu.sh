#!/usr/bin/env bash
# The node's sweep, in CPU (docs/BENCHMARKS.md, "A fourth pass"): a node holding KEYS
# token_bucket keys (default 1,000,000; `100 per 1h`, so none is full again while measured)
# and taking no request, its CPU over SECS seconds (default 20): what the sweep costs, which
# visits every key in turn and asks whether it is full. With BASE=DIR (another build's
# directory), that node too, alternating, RUNS rounds (default 3); medians.
#   bench/sweep_cpu.sh            BASE=/path/to/other/build bench/sweep_cpu.sh
source "$(dirname "$0")/lib.sh"
keys=${KEYS:-1000000}
secs=${SECS:-20}
runs=${RUNS:-3}
build_release
scratch
machine
echo "commit: $(git -C "$top" rev-parse --short HEAD); load: $(cut -d' ' -f1-3 /proc/loadavg)"
idle_ms() { # BIN: the node's CPU (ms) over secs, after keys made
    local b=$1 port t0 t1 node
    port=$(free_port)
    printf '[cluster]\nname = t\n[node n]\nlisten = 127.0.0.1:%s\nmemory = 4g\n[service bench]\nlimit = token_bucket 100 per 1h\n' \
        "$port" > "$work/s.conf"
    taskset -c 0 "$b/rl-node" --config "$work/s.conf" --name n --metrics off 2>>"$work/node.log" &
    node=$!; pids+=($node)
    wait_port "$port"
    taskset -c 1 "$b/rl-bench" --target 127.0.0.1:$port --service bench --keys "$keys" \
        --sequential --requests "$keys" --connections 4 --pipeline 256 --json >/dev/null
    sleep 3
    t0=$(ticks $node); sleep "$secs"; t1=$(ticks $node)
    bench_cleanup
    echo $(( (t1 - t0) * 1000 / hz ))
}
for r in $(seq 1 "$runs"); do
    c=$(idle_ms "$bin"); echo "round $r current: $c ms"; echo "$c" >> "$work/cur"
    if [ -n "${BASE:-}" ]; then
        b=$(idle_ms "$BASE"); echo "round $r base: $b ms"; echo "$b" >> "$work/base"
    fi
done
echo "RESULT current: $(median < "$work/cur") ms of CPU over $secs s holding $keys keys"
[ -z "${BASE:-}" ] || echo "RESULT base ($BASE): $(median < "$work/base") ms of CPU over $secs s holding $keys keys"
