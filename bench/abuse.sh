#!/usr/bin/env bash
# Hostile clients against a real rl-node and rl-router (docs/BENCHMARKS.md, "Under abuse"):
#   bench/abuse.sh [idle|stream|flood|slowloris|preauth|inline|scrapers|grpc|all]   (RUNS rounds, 3 by default; BIN=build dir)
# idle:   RSS growth of a node and of a router holding 1,000 idle connections that each sent
#         one legal 64 KiB frame, and a neighbour's PING p50/p99 meanwhile;
# stream: a neighbour's PING p50/p99 while one client streams 64 KiB frames at a node;
# flood:  per algorithm, a node with memory = 1mb flooded with 100,000 users of one service:
#         does a limited user of another service stay limited, and how many of 150 requests
#         of a new user pass a limit of 100.
# slowloris: a node's metrics listener while 40 connections from 127.0.0.1 drip a header
#         line a second: /healthz from 127.0.0.2 (answered, p50/max), and how many dripping
#         connections were closed at once and how many were still open after 8 s.
# preauth: a router with a [client web] section (AUTH required): wrong tokens a second from
#         one process, and whether a client with the valid token gets in while 10 addresses
#         hold 1,000 silent connections each.
# inline: a router with two [client] tokens and a RESP listener: one client floods 200,000
#         distinct CL.THROTTLE limits, then does the other's CL.THROTTLE (100 a minute) still
#         hold (node memory 64mb); then, node memory 1mb, one client's KEYS (500,000) distinct
#         keys in force: is the other's used-up CL.THROTTLE key still refused.
# scrapers: (not in all) a node and a router with SERVICES services (default "20000 60000",
#         one token_bucket tier each) and their metrics listeners: the loop thread's CPU per
#         rendered scrape of each (loopcpu, 5 scrapes 1.1 s apart); then, at 20,000 services
#         only, CHECKs through the router at 2,000/s (rl-bench --rate) for 8 s while 4
#         threads pull the node's /metrics back to back: FAIL_OPEN answers (the router's
#         deadline, 50 ms, ran out) and CHECK p99. With BASE=/path/to/other/build, each round
#         runs that build (side "base") and BIN's (side "new") one after the other.
# grpc:   (not in all) a router (one worker, [clients] idle_timeout = 10s) with its gRPC front
#         (bench/abuse_grpc.py): 10,000 silent sockets, then is a call on a new connection
#         answered, and how many silent ones are open 8 s later; an HPACK bomb and a
#         WINDOW_UPDATE flood on 2 connections while a neighbour calls back to back (its
#         p50/p99); 50 connections that send PINGs (500 every 20 ms, up to 6 MB) and never
#         read (RSS growth, still open after 15 s). With BASE=/path/to/other/build, each round runs that build too.
# Prints RESULT lines, then the median of each figure over the rounds. Runs against any
# build of the project (BIN=/path/to/build), so an older revision can be measured the same
# way: the config uses no section that revision may lack.
source "$(dirname "$0")/lib.sh"
bin=${BIN:-$bin}
what=${1:-all}
runs=${RUNS:-3}
tmp=$(mktemp -d)
trap 'bench_cleanup; rm -rf "$tmp"' EXIT
probe=$top/bench/abuse_probe.py
algos="fixed_window sliding_window_log sliding_window_counter token_bucket gcra leaky_bucket"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# start_inline MEMORY: a node of MEMORY and a router with a RESP listener and two clients,
# attacker and victim, whose tokens are in $RL_ATTACK_TOKEN and $RL_VICTIM_TOKEN.
start_inline() {
    local h1 h2
    RL_ATTACK_TOKEN=attack-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    RL_VICTIM_TOKEN=victim-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    export RL_ATTACK_TOKEN RL_VICTIM_TOKEN
    h1=$(printf '%s' "$RL_ATTACK_TOKEN" | sha256sum | cut -d' ' -f1)
    h2=$(printf '%s' "$RL_VICTIM_TOKEN" | sha256sum | cut -d' ' -f1)
    resp_port=$(free_port)
    start_cluster "$1" "" "$(printf '[client attacker]\ntoken_sha256 = %s\nservices = *\n[client victim]\ntoken_sha256 = %s\nservices = *\n' "$h1" "$h2")" "resp = 127.0.0.1:$resp_port"
    wait_port "$resp_port"
}

start_cluster() {
    local s
    node_port=$(free_port)
    router_port=$(free_port)
    metrics_port=$(free_port)
    {
        printf '[cluster]\nname = abuse\n[router]\nlisten = 127.0.0.1:%s\n' "$router_port"
        [ -z "${4:-}" ] || printf '%s\n' "$4"
        printf '[node n1]\nlisten = 127.0.0.1:%s\nmemory = %s\n' "$node_port" "$1"
        [ -z "${2:-}" ] || printf 'metrics = 127.0.0.1:%s\n' "$metrics_port"
        [ -z "${3:-}" ] || printf '%s\n' "$3"
        for s in $algos; do
            printf '[service victim_%s]\nlimit = %s 5 per 1h\n' "$s" "$s"
            printf '[service flood_%s]\nlimit = %s 100 per 1h\n' "$s" "$s"
        done
    } >"$tmp/abuse.conf"
    "$bin/rl-node" --config "$tmp/abuse.conf" --name n1 --log-level error 2>"$tmp/node.log" &
    node_pid=$!
    pids+=($node_pid)
    "$bin/rl-router" --config "$tmp/abuse.conf" --log-level error 2>"$tmp/router.log" &
    router_pid=$!
    pids+=($router_pid)
    wait_port "$node_port"
    wait_port "$router_port"
}

# start_many BIN N: rl-node and rl-router of BIN with N services and metrics listeners.
start_many() {
    node_port=$(free_port)
    router_port=$(free_port)
    metrics_port=$(free_port)
    rmetrics_port=$(free_port)
    python3 - "$2" >"$tmp/many.conf" <<PY
import sys
print("[cluster]\nname = scrapers\n[router]\nlisten = 127.0.0.1:$router_port")
print("metrics = 127.0.0.1:$rmetrics_port\n[node n1]\nlisten = 127.0.0.1:$node_port")
print("metrics = 127.0.0.1:$metrics_port")
for i in range(int(sys.argv[1])):
    print("[service s%06d]\nlimit = token_bucket 100 per 1s" % i)
PY
    "$1/rl-node" --config "$tmp/many.conf" --name n1 --log-level error 2>"$tmp/node.log" &
    node_pid=$!
    pids+=($node_pid)
    "$1/rl-router" --config "$tmp/many.conf" --log-level error 2>"$tmp/router.log" &
    router_pid=$!
    pids+=($router_pid)
    wait_port "$node_port" || return 1
    wait_port "$router_port" || return 1
    wait_port "$metrics_port" || return 1
    wait_port "$rmetrics_port" || return 1
    sleep 1
}

# start_grpc BIN: rl-node and rl-router of BIN, the router with a gRPC front on $rls_port.
start_grpc() {
    node_port=$(free_port)
    router_port=$(free_port)
    rls_port=$(free_port)
    printf 'domain: edge\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1000000000\n' >"$tmp/edge.yaml"
    printf '[cluster]\nname = abusegrpc\nenvoy_config = %s\n[router]\nlisten = 127.0.0.1:%s\nrls = 127.0.0.1:%s\nworkers = 1\n[clients]\nidle_timeout = 10s\n[node n1]\nlisten = 127.0.0.1:%s\n' \
        "$tmp/edge.yaml" "$router_port" "$rls_port" "$node_port" >"$tmp/grpc.conf"
    "$1/rl-node" --config "$tmp/grpc.conf" --name n1 --log-level error 2>"$tmp/node.log" &
    node_pid=$!
    pids+=($node_pid)
    "$1/rl-router" --config "$tmp/grpc.conf" --log-level error 2>"$tmp/router.log" &
    router_pid=$!
    pids+=($router_pid)
    wait_port "$node_port" || return 1
    wait_port "$rls_port" || return 1
    sleep 0.5
}

grpc_round() {
    local side b
    trap bench_cleanup EXIT
    for side in ${BASE:+base} new; do
        b=$bin
        [ "$side" = new ] || b=$BASE
        start_grpc "$b" || { bench_cleanup; start_grpc "$b"; }
        timeout 120 python3 "$top/bench/abuse_grpc.py" silent "$rls_port" "$router_pid" 10000 |
            sed "s#^RESULT grpc silent#RESULT grpc $side/silent#"
        bench_cleanup
        for kind in hpack winupdate; do
            start_grpc "$b" || { bench_cleanup; start_grpc "$b"; }
            timeout 60 python3 "$top/bench/abuse_grpc.py" bomb "$rls_port" "$kind" |
                sed "s#^RESULT grpc $kind#RESULT grpc $side/$kind#"
            bench_cleanup
        done
        start_grpc "$b" || { bench_cleanup; start_grpc "$b"; }
        timeout 120 python3 "$top/bench/abuse_grpc.py" noread "$rls_port" "$router_pid" 50 |
            sed "s#^RESULT grpc noread#RESULT grpc $side/noread#"
        bench_cleanup
    done
}

scrapers_round() {
    local side n b lg out
    trap bench_cleanup EXIT # this runs in the pipeline's subshell
    for side in ${BASE:+base} new; do
        b=$bin
        [ "$side" = new ] || b=$BASE
        for n in ${SERVICES:-20000 60000}; do
            # A port taken meanwhile by another process (a shared machine): once more.
            start_many "$b" "$n" || { bench_cleanup; start_many "$b" "$n"; }
            python3 "$probe" loopcpu "$metrics_port" "$node_pid" "node/$n/$side"
            python3 "$probe" loopcpu "$rmetrics_port" "$router_pid" "router/$n/$side"
            if [ "$n" = 20000 ]; then
                "$bin/rl-bench" --target "127.0.0.1:$router_port" --service s000001 \
                    --keys 100000 --connections 4 --rate 2000 --duration 8 --json \
                    >"$tmp/checks.json" &
                lg=$!
                sleep 0.5
                python3 "$probe" scrapers "$metrics_port" 4 7 |
                    sed "s#^RESULT scrapers pages#RESULT scrapers $side/$n#"
                wait "$lg" || true
                out=$(tail -1 "$tmp/checks.json")
                echo "RESULT checks $side/$n fail_open=$(json fail_open <<<"$out")" \
                    "p99_us=$(json p99_us <<<"$out") max_us=$(json max_us <<<"$out")" \
                    "decisions=$(json decisions <<<"$out")"
            fi
            bench_cleanup
        done
    done
}

machine
echo "binaries: $bin ($("$bin/rl-node" --version 2>&1 | head -1))"
for round in $(seq 1 "$runs"); do
    if [ "$what" = scrapers ]; then
        scrapers_round
    fi
    if [ "$what" = grpc ]; then
        grpc_round
    fi
    if [ "$what" = idle ] || [ "$what" = all ]; then
        start_cluster 1gb
        python3 "$probe" idle "$node_port" "$node_pid" 1000 | sed 's/^RESULT idle/RESULT idle node/'
        python3 "$probe" idle "$router_port" "$router_pid" 1000 | sed 's/^RESULT idle/RESULT idle router/'
        bench_cleanup
    fi
    if [ "$what" = stream ] || [ "$what" = all ]; then
        start_cluster 1gb
        timeout 60 python3 "$probe" stream "$node_port" | sed 's/^RESULT stream/RESULT stream node/'
        bench_cleanup
    fi
    if [ "$what" = slowloris ] || [ "$what" = all ]; then
        start_cluster 1gb metrics
        wait_port "$metrics_port"
        timeout 60 python3 "$probe" slowloris "$metrics_port"
        bench_cleanup
    fi
    if [ "$what" = preauth ] || [ "$what" = all ]; then
        printf 'web-token-%s\n' "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
            >"$tmp/web.token"
        hash=$(sha256sum <(tr -d '\n' <"$tmp/web.token") | cut -d' ' -f1)
        start_cluster 1gb "" "$(printf '[client web]\ntoken_sha256 = %s\nservices = *\n' "$hash")"
        timeout 60 python3 "$probe" wrongtokens "$router_port"
        sleep 3
        RL_TOKEN_FILE=$tmp/web.token timeout 120 python3 "$probe" silentflood "$router_port"
        bench_cleanup
    fi
    if [ "$what" = inline ] || [ "$what" = all ]; then
        start_inline 64mb
        timeout 300 python3 "$probe" inlinelimits "$resp_port"
        bench_cleanup
        start_inline 1mb
        timeout 300 python3 "$probe" inlinekeys "$resp_port"
        bench_cleanup
    fi
    if [ "$what" = flood ] || [ "$what" = all ]; then
        for a in $algos; do
            start_cluster 1mb
            timeout 120 python3 "$probe" flood "$node_port" "$a"
            bench_cleanup
        done
    fi
done | tee "$tmp/results"
echo "medians over $runs rounds:"
grep '^RESULT' "$tmp/results" | python3 -c '
import statistics, sys
rows = {}
for line in sys.stdin:
    f = line.split()[1:]
    key = " ".join(f[:2]) if f[0] != "flood" else " ".join(f[:2])
    for kv in f[2:]:
        k, _, v = kv.partition("=")
        try:
            rows.setdefault(key, {}).setdefault(k, []).append(float(v))
        except ValueError:
            pass
for key in sorted(rows):
    print(key, " ".join("%s=%g" % (k, statistics.median(v)) for k, v in rows[key].items()))
'
