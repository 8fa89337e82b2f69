#!/usr/bin/env bash
# What metrics cost a node (docs/BENCHMARKS.md, "Metrics"): one rl-node, static membership,
# token_bucket over 1M keys, pipelined, decisions/s, for
#   base     a baseline revision (default 2d0a9f8, before metrics existed),
#   off      this checkout without a metrics listener (what the counters and the per-batch
#            latency histogram cost by themselves),
#   scraped  this checkout with `metrics =` set and /metrics fetched every 100 ms during the
#            run (ten times a typical 1 s scrape interval) by one python3 process on core 1
#            (in the other rounds it scrapes an idle decoy node instead, so the load
#            generator's core carries the same scraper in every round),
# then the CPU one scrape costs the node, from /proc, over 2000 back-to-back scrapes.
# Rounds alternate base, off, scraped so all see the same machine conditions.
#   bench/metrics.sh [REV]          (RUNS=3 rounds by default)
# The node is pinned to core 0, rl-bench and the scraper to core 1.
source "$(dirname "$0")/lib.sh"
rev=${1:-2d0a9f8}
runs=${RUNS:-3}
bash "$top/scripts/build.sh" release >/dev/null
work=$(mktemp -d)
base=$work/base
git -C "$top" worktree add --detach "$base" "$rev" >/dev/null
cleanup() {
    bench_cleanup
    git -C "$top" worktree remove --force "$base" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
(cd "$base" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build build -j"$(nproc)" --target rl-node >/dev/null)
machine

port=$(free_port)
mport=$(free_port)
conf() { # NAME EXTRA
    cat > "$work/$1.conf" <<CONF
[cluster]
name = metrics-$1
[node n]
listen = 127.0.0.1:$port
memory = 4g
$2
[service bench]
limit = token_bucket 100 per 1m
CONF
}
conf base ""
conf off ""
conf scraped "metrics = 127.0.0.1:$mport"
# A decoy: an idle rl-node on core 1 with its own metrics listener. In the base and off
# rounds the scraper scrapes it instead, so every round has the same scraper working on the
# load generator's core, and only the node under test differs.
dport=$(free_port)
dmport=$(free_port)
cat > "$work/decoy.conf" <<CONF
[cluster]
name = metrics-decoy
[node d]
listen = 127.0.0.1:$dport
metrics = 127.0.0.1:$dmport
[service bench]
limit = token_bucket 100 per 1m
CONF
taskset -c 1 "$bin/rl-node" --config "$work/decoy.conf" --name d 2>>"$work/node-decoy.log" &
decoy=$!
pids=($decoy)
wait_port "$dport"

declare -A results
for round in $(seq 1 "$runs"); do
    for side in base off scraped; do
        nodebin=$bin/rl-node
        [ "$side" = base ] && nodebin=$base/build/rl-node
        taskset -c 0 "$nodebin" --config "$work/$side.conf" --name n 2>>"$work/node-$side.log" &
        node=$!; pids=($decoy $node)
        wait_port "$port"
        taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench \
            --keys 1000000 --sequential --requests 1000000 --connections 4 --pipeline 256 \
            --json > /dev/null
        # One long-lived scraper on the load generator's core (a shell loop would fork a
        # process or three per scrape, which costs more than the scrape), in every round:
        # of the node under test when it is the scraped side, else of the decoy.
        target=$dmport
        [ "$side" = scraped ] && target=$mport
        taskset -c 1 python3 - "$target" "$work/last.prom" <<'PY' &
import sys, time, urllib.request
url = "http://127.0.0.1:%s/metrics" % sys.argv[1]
while True:
    t = time.monotonic()
    body = urllib.request.urlopen(url, timeout=5).read()
    with open(sys.argv[2], "wb") as f:
        f.write(body)
    time.sleep(max(0.0, 0.1 - (time.monotonic() - t)))
PY
        scraper=$!
        pids+=($scraper)
        out=$(taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench \
            --keys 1000000 --connections 4 --pipeline 256 --duration 5 --json | tail -1)
        kill "$scraper"; wait "$scraper" 2>/dev/null || true
        t=$(echo "$out" | json decisions_per_s)
        errs=$(echo "$out" | json errors)
        extra=
        if [ "$side" = scraped ]; then
            n=$(grep -c . "$work/last.prom")
            extra=", last scrape $n lines, $(grep '^rl_node_decision_duration_seconds_count' "$work/last.prom")"
        fi
        echo "$side round $round: $t decisions/s (errors ${errs:-0}, p50 $(echo "$out" | json p50_us) us$extra)"
        results[$side]+="$t "
        kill "$node"; wait "$node" 2>/dev/null || true; pids=($decoy)
    done
done
b=$(printf '%s\n' ${results[base]} | median)
for side in base off scraped; do
    m=$(printf '%s\n' ${results[$side]} | median)
    echo "RESULT $side: median $m decisions/s over $runs rounds ($(awk -v a=$m -v b=$b 'BEGIN {printf "%.3f", a/b}') of base $rev)"
done

# What one scrape costs the node, measured directly: the node (with 1M keys, idle) is
# scraped 2000 times back to back, and its CPU time (all threads, and the event loop's
# thread alone) is read from /proc before and after.
taskset -c 0 "$bin/rl-node" --config "$work/scraped.conf" --name n 2>>"$work/node-cpu.log" &
node=$!; pids=($decoy $node)
wait_port "$port"
taskset -c 1 "$bin/rl-bench" --target 127.0.0.1:$port --service bench --keys 1000000 \
    --sequential --requests 1000000 --connections 4 --pipeline 256 --json > /dev/null
taskset -c 1 python3 - "$node" "$mport" <<'PY'
import os, sys, time, urllib.request
pid, port = sys.argv[1], sys.argv[2]
tick = os.sysconf("SC_CLK_TCK")
def cpu(path):
    f = open(path).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick          # utime + stime, seconds
url = "http://127.0.0.1:%s/metrics" % port
n = 2000
p0, l0, t0 = cpu("/proc/%s/stat" % pid), cpu("/proc/%s/task/%s/stat" % (pid, pid)), time.monotonic()
for _ in range(n):
    urllib.request.urlopen(url, timeout=5).read()
p1, l1, t1 = cpu("/proc/%s/stat" % pid), cpu("/proc/%s/task/%s/stat" % (pid, pid)), time.monotonic()
per = (p1 - p0) / n * 1e6
loop = (l1 - l0) / n * 1e6
print("RESULT scrape cost: %.0f us of node CPU per scrape (%.0f us on the event loop's thread), "
      "%.2f ms per scrape end to end; at one scrape a second %.3f%% of a core, at 10/s %.2f%%"
      % (per, loop, (t1 - t0) / n * 1e3, per / 1e4, per / 1e3))
PY
kill "$node"; wait "$node" 2>/dev/null || true; pids=($decoy)
