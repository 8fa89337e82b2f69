#!/usr/bin/env bash
# The main job: sets everything up, then runs a local ratelimiter cluster serving real
# traffic: ZooKeeper, three nodes (a, b, c) and a router, with rl-bench sending CHECKs
# through the router. Midway node b is killed with SIGKILL and later restarted, and the
# script prints, second by second, decisions/s, reply codes and which node owns how many
# shards, so you watch the cluster serve, lose a node and heal. Everything it started is
# stopped on exit (Ctrl-C included). Ports: ZooKeeper 2191, router 7400, nodes 7401-7403,
# their Prometheus metrics 9400-9403 (from cluster.conf); they are checked before anything
# is built or deleted, and whatever holds one is named. At the end it shows the cluster's
# status, the throttling episodes and a few metrics. Logs and the cluster's config go to
# run/demo/ (emptied at the start).
# It builds the five programs it runs first (1 to 2 minutes the first time on 2 cores, a
# line per library or program built; seconds afterwards).
# Environment: DEMO_SECONDS, how long the traffic runs and the cluster stays up (default 30;
# e.g. DEMO_SECONDS=300 to try README's "Operating it live" from another terminal meanwhile),
# DEMO_RATE, requests/s (default 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
seconds=${DEMO_SECONDS:-30}
rate=${DEMO_RATE:-20000}
for v in DEMO_SECONDS="$seconds" DEMO_RATE="$rate"; do
    case "${v#*=}" in
    '' | *[!0-9]* | 0*) echo "demo: $v is not a whole number >= 1" >&2; exit 2 ;;
    esac
done
zkport=2191
# Before building or deleting anything: every port the demo needs must be free.
busy=0
for p in $zkport 7400 7401 7402 7403 9400 9401 9402 9403; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        who=$(ss -Hltnp "sport = :$p" 2>/dev/null | grep -o '(("[^"]*",pid=[0-9]*' | head -1 |
            sed 's/(("\(.*\)",pid=\(.*\)/\1 (pid \2)/' || true)
        echo "demo: port $p is in use by ${who:-another process}" >&2
        busy=1
    fi
done
if [ "$busy" = 1 ]; then
    echo "demo: stop what holds these ports first (kill PID; an rl-node left from the" \
        "README's tour, or an earlier demo); nothing was built, started or deleted" >&2
    exit 1
fi
# Only the five programs the demo runs (scripts/build.sh builds the tests too). The first
# time, the Debian packages may be installed (scripts/deps.sh) and everything is compiled:
# 1 to 2 minutes on 2 cores; then only what changed, a few seconds.
targets=(rl-node rl-router rl-cli rl-bench rl-rebalance)
mkdir -p build
if [ -x build/rl-node ] && [ -x build/rl-router ] && [ -f build/CMakeCache.txt ]; then
    echo "== building ${targets[*]}: what changed since the last build (log: build/demo-build.log)"
else
    echo "== building ${targets[*]} for the first time: 1 to 2 minutes on 2 cores, more" \
        "when packages are installed first (log: build/demo-build.log)"
fi
t0=$SECONDS
set +e
{
    bash scripts/deps.sh &&
        cmake -S . -B build -DCMAKE_BUILD_TYPE=Release &&
        cmake --build build -j"$(nproc)" --target "${targets[@]}"
} 2>&1 | tee build/demo-build.log | {
    # One line per library or program built (once: the five share libraries), with the
    # time so far.
    declare -A seen=()
    while IFS= read -r line; do
        case "$line" in
        *"Built target "*)
            t=${line##*Built target }
            [ -n "${seen[$t]:-}" ] || printf '   built %s (%d s)\n' "$t" $((SECONDS - t0))
            seen[$t]=1
            ;;
        "deps: installing"*) printf '   %s\n' "$line" ;;
        esac
    done
}
status=${PIPESTATUS[0]}
set -e
if [ "$status" != 0 ]; then
    tail -30 build/demo-build.log
    exit 1
fi
echo "== built in $((SECONDS - t0)) s"
bin=$top/build
run=$top/run/demo
rm -rf "$run"
mkdir -p "$run"
sed -e "s/^zookeeper *=.*/zookeeper = 127.0.0.1:$zkport/" \
    -e "s|^request_log *=.*|request_log = $run/requests.log|" cluster.conf > "$run/cluster.conf"
conf=$run/cluster.conf

pids=()
cleanup() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    bash "$top/scripts/zk.sh" stop "$run/zk"
    echo "demo: stopped everything; logs are in $run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_node() {
    "$bin/rl-node" --config "$conf" --name "$1" 2>>"$run/node-$1.log" &
    eval "pid_$1=$!"
    pids+=($!)
}

echo "== starting ZooKeeper on 127.0.0.1:$zkport"
bash scripts/zk.sh start "$run/zk" $zkport
echo "== starting nodes a, b, c and the router (127.0.0.1:7400)"
for n in a b c; do start_node $n; done
"$bin/rl-router" --config "$conf" 2>>"$run/router.log" &
pids+=($!)
for _ in $(seq 1 100); do
    members=$("$bin/rl-cli" --target 127.0.0.1:7400 stats 2>/dev/null | awk '$1=="members"{print $2}' || true)
    [ "${members:-0}" = 3 ] && break
    sleep 0.1
done
echo "== the router sees ${members:-0} nodes"

echo "== a few requests by hand (rl-cli), service \"checkout\": token_bucket 100/min burst 20"
# rl-cli's exit status is the answer (3 LIMITED, 7 NO_RULE): not a failure here.
{ "$bin/rl-cli" --target 127.0.0.1:7400 check checkout alice --repeat 22 || true; } | sed -n '1,3p;19,22p'
echo "   ... alice got her burst of 20, then LIMITED with a retry-after (rl-cli exits 3)."
"$bin/rl-cli" --target 127.0.0.1:7400 check checkout alice /pay || true
"$bin/rl-cli" --target 127.0.0.1:7400 check unknown-service bob || echo "   (rl-cli exit status $?: NO_RULE)"
echo

echo "== ${seconds}s of rl-bench traffic through the router at ${rate} req/s (service \"bench\")"
echo "   node b is killed at $((seconds / 4))s and restarted at $((seconds * 3 / 5))s"
"$bin/rl-bench" --target 127.0.0.1:7400 --service bench --keys 100000 --dist zipf \
    --rate "$rate" --duration "$seconds" --connections 4 > "$run/bench.out" 2>&1 &
bench=$!
pids+=($bench)

stat() { awk -v k="$1" '$1==k{print $2}' "$2"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
prev=$run/stats.prev
cur=$run/stats.cur
# Each row is one real second of traffic: the snapshots are taken on a fixed schedule
# (t0 + 1 s, t0 + 2 s, ...), whatever the previous row cost, and each row's rates are
# divided by the time that really passed between its two snapshots.
t0=$(now_ms)
"$bin/rl-cli" --target 127.0.0.1:7400 stats > "$prev"
prev_ms=$(now_ms)
printf '%6s %9s %9s %9s %9s %9s   %s\n' t "checks/s" allowed/s limited/s fail_open fail_clsd \
    "owners (shards; * = connected)"
for t in $(seq 1 "$seconds"); do
    left=$(( t0 + t * 1000 - $(now_ms) ))
    [ "$left" -gt 0 ] && sleep "$(awk -v l="$left" 'BEGIN {printf "%.3f", l / 1000}')"
    "$bin/rl-cli" --target 127.0.0.1:7400 stats > "$cur" || continue
    cur_ms=$(now_ms)
    owners=""
    for n in a b c; do
        s=$(stat "node.$n.shards" "$cur")
        up=$(stat "node.$n.up" "$cur")
        if [ -z "$s" ]; then
            owners="$owners $n=-"
        elif [ "$up" = 1 ]; then
            owners="$owners $n=$s*"
        else
            owners="$owners $n=$s"
        fi
    done
    span=$(( cur_ms - prev_ms ))
    d() { awk -v a="$(stat "$1" "$cur")" -v b="$(stat "$1" "$prev")" -v ms="$span" \
        'BEGIN {printf "%d", (a - b) * 1000 / (ms > 0 ? ms : 1)}'; }
    printf '%6s %9s %9s %9s %9s %9s  %s\n' \
        "$(awk -v ms=$(( cur_ms - t0 )) 'BEGIN {printf "%.1fs", ms / 1000}')" "$(d checks)" \
        "$(d allowed)" "$(d limited)" "$(d fail_open)" "$(d fail_closed)" "$owners"
    cp "$cur" "$prev"
    prev_ms=$cur_ms
    if [ "$t" = $((seconds / 4)) ]; then
        kill -9 "$pid_b"
        wait "$pid_b" 2>/dev/null || true
        echo "---- $(awk -v ms=$(( $(now_ms) - t0 )) 'BEGIN {printf "%.1fs", ms / 1000}'): kill -9 node b (its counters are gone; its users get the failure policy until ZooKeeper drops it)"
    fi
    if [ "$t" = $((seconds * 3 / 5)) ]; then
        start_node b
        echo "---- $(awk -v ms=$(( $(now_ms) - t0 )) 'BEGIN {printf "%.1fs", ms / 1000}'): node b restarted (re-registers, takes its shards back from zero)"
    fi
done
wait "$bench" || true
echo
echo "== rl-bench summary"
cat "$run/bench.out"
sleep 1.2 # the router flushes its request log at least once a second
echo "== request log: $(wc -l < "$run/requests.log" 2>/dev/null || echo 0) lines in $run/requests.log"
echo "== what rl-rebalance would do with it (--dry-run: nothing is written)"
"$bin/rl-rebalance" --config "$conf" --dry-run "$run/requests.log" || true
echo
echo "== rl-cli status (the cluster on one screen)"
"$bin/rl-cli" --target 127.0.0.1:7400 status --config "$conf" || true
echo
echo "== rl-cli throttled --top 5 (who was refused, from when, how often)"
"$bin/rl-cli" --target 127.0.0.1:7400 throttled --top 5 || true
echo
echo "== a few of the router's Prometheus metrics (http://127.0.0.1:9400/metrics)"
python3 - <<'PY' || true
import urllib.request
text = urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith(("rl_router_decisions_total", "rl_router_policy_answers_total",
                        "rl_router_request_duration_seconds_count", "rl_router_members")) \
            and not line.endswith(" 0"):
        print("   " + line)
PY
