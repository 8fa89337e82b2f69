#!/usr/bin/env bash
# Decisions a second of one client keeping many requests in flight through one router worker
# to one node (docs/BENCHMARKS.md, "A node's time shared between clients": what the node
# window costs a client that keeps more than a window in flight). A node and a router from
# BIN_DIR on free loopback ports (static membership, deadline 50ms, workers = 1,
# `fixed_window 1000000000 per 1h`), then `rl-bench --connections C --pipeline P` for 5 s.
#   bench/deep_pipeline.sh BIN_DIR C P        EXTRA="node_window = N" adds [router] lines
set -euo pipefail
bin=$1 conns=$2 pipe=$3
d=$(mktemp -d)
rp=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
np=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$d/c.conf" <<EOC
[cluster]
name = deep
shards = 64
[router]
listen = 127.0.0.1:$rp
deadline = 50ms
workers = 1
${EXTRA:-}
[node a]
listen = 127.0.0.1:$np
memory = 512mb
[service bench]
limit = fixed_window 1000000000 per 1h
EOC
"$bin/rl-node" --config "$d/c.conf" --name a --log-file "$d/n.log" & n=$!
trap 'kill $n ${r:-} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$d"' EXIT
sleep 0.5
"$bin/rl-router" --config "$d/c.conf" --log-file "$d/r.log" & r=$!
sleep 0.7
"$bin/rl-bench" --target "127.0.0.1:$rp" --connections "$conns" --pipeline "$pipe" --duration 5 --json |
    tail -1 | /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print("%s x %s: decisions/s %.0f allowed %d fail_open %d p50 %.0f us p99 %.0f us" % (sys.argv[1], sys.argv[2], d["decisions_per_s"], d["allowed"], d["fail_open"], d["p50_us"], d["p99_us"]))' "$conns" "$pipe"
