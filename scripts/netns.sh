#!/usr/bin/env bash
# A ratelimiter cluster spread over hosts inside this machine: network namespaces joined by
# veth pairs to a bridge, on a private test subnet that nothing else reaches. ZooKeeper,
# nodes a, b, c and routers 1, 2 each run on a host (namespace) of their own, listening on
# that host's address and advertising it, with the cluster secret on every process and a
# client token on the routers, and TLS on every link (a throwaway CA, a certificate per
# host, mutual TLS towards the nodes); rl-chaos drives the traffic from a sixth host over
# TLS, breaks the network (one host's interface taken down, then blackhole routes between
# hosts) and checks its invariants across hosts (docs/CHAOS.md, "Across hosts"). While it
# runs, a plaintext rl-cli from the clients' host must be refused by a router with
# "TLS is required".
#
#   scripts/netns.sh [SCENARIO]     default tools/chaos/netns/hosts-partition.ini
#
# Needs root and `ip netns` (iproute2). Without them it prints
# "netns: skipped (needs root and ip netns)" and exits 0, so scripts/test.sh can always run
# it. Exit status otherwise: rl-chaos's (0 every invariant held), or 1 if the plaintext
# client was not refused as it should be.
#
# Isolation: everything, the bridge included, lives in namespaces named rlnf<PID>-*; the
# bridge is in a namespace of its own (rlnf<PID>-sw), so nothing is added to this machine's
# own network: no interface, no address, no route, no NAT. The subnet 10.213.7.0/24 exists
# only inside those namespaces, none has a default route, and every connection stays on
# addresses of these namespaces. Everything is torn down on every exit (trap), and
# namespaces and temporary directories left by a run that was killed (its PID gone) are
# removed at the start.
#
# A failing run's output ends with the warnings and handoff lines of every node's and
# router's log. Environment: BUILD (default build), TLS=0 runs the
# cluster in plaintext (default TLS=1; needs the openssl command).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SCENARIO=${1:-tools/chaos/netns/hosts-partition.ini}
SUBNET=10.213.7
P=rlnf$$
TLS=${TLS:-1}
case "$TLS" in 0 | 1) ;; *)
    echo "netns: TLS is 0 or 1, not \"$TLS\"" >&2
    exit 2
    ;;
esac

skip() {
    echo "netns: skipped (needs root and ip netns)${1:+: $1}"
    exit 0
}
[ "$(id -u)" = 0 ] || skip "not root"
command -v ip > /dev/null || skip "no ip command"
if [ "$TLS" = 1 ] && ! command -v openssl > /dev/null; then
    echo "netns: TLS=1 needs the openssl command (or run with TLS=0)" >&2
    exit 2
fi
ip netns add "$P-probe" 2> /dev/null || skip "ip netns add failed"
# what the run needs of the kernel: a bridge and veth pairs inside a namespace
if ! { ip -n "$P-probe" link add br0 type bridge &&
    ip -n "$P-probe" link add v0 type veth peer name v1; } 2> /dev/null; then
    ip netns del "$P-probe"
    skip "no bridge or veth in a namespace"
fi
ip netns del "$P-probe"

# Leftovers of runs that were killed before their trap ran: namespaces of a dead PID.
for ns in $(ip netns list | awk '{print $1}' | grep -E '^rlnf[0-9]+-' || true); do
    pid=${ns#rlnf}
    pid=${pid%%-*}
    if ! kill -0 "$pid" 2> /dev/null; then
        for p in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$p" 2> /dev/null || true; done
        ip netns del "$ns" 2> /dev/null || true
    fi
done
for d in /tmp/rl-netns-[0-9]*-*; do # their secrets and hosts files
    [ -d "$d" ] || continue
    pid=${d#/tmp/rl-netns-}
    pid=${pid%%-*}
    kill -0 "$pid" 2> /dev/null || rm -rf "$d"
done

hosts=(zk a b c r1 r2 cl) # ZooKeeper, nodes, routers, the clients (rl-chaos)
declare -A addr=([zk]=$SUBNET.10 [a]=$SUBNET.11 [b]=$SUBNET.12 [c]=$SUBNET.13
    [r1]=$SUBNET.21 [r2]=$SUBNET.22 [cl]=$SUBNET.30)
work=$(mktemp -d "/tmp/rl-netns-$$-XXXXXX")
chaos_pid=

teardown() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$chaos_pid" ]; then
        kill "$chaos_pid" 2> /dev/null || true # its children die with it (PDEATHSIG)
        wait "$chaos_pid" 2> /dev/null || true
    fi
    for h in "${hosts[@]}" sw; do
        for p in $(ip netns pids "$P-$h" 2> /dev/null); do kill -9 "$p" 2> /dev/null || true; done
        ip netns del "$P-$h" 2> /dev/null || true
    done
    rm -rf "$work"
    exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# The switch: a bridge in a namespace of its own, one veth pair per host. A host's end is
# eth0 in its namespace, with one address on the test subnet and no other route.
ip netns add "$P-sw"
ip -n "$P-sw" link set lo up
ip -n "$P-sw" link add br0 type bridge
ip -n "$P-sw" link set br0 up
for h in "${hosts[@]}"; do
    ip netns add "$P-$h"
    ip -n "$P-$h" link set lo up
    ip -n "$P-sw" link add "p-$h" type veth peer name eth0 netns "$P-$h"
    ip -n "$P-sw" link set "p-$h" master br0 up
    ip -n "$P-$h" addr add "${addr[$h]}/24" dev eth0
    ip -n "$P-$h" link set eth0 up
done
# The cluster secret (every process: nodes AUTH with it, ZooKeeper ACLs come from it) and
# the clients' token (the routers' [client chaos] section; rl-chaos AUTHs with it).
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/cluster.secret"
sha=$("$BUILD/rl-cli" gen-token "$work/chaos.token" | sed -n 's/^token_sha256 = //p')

# TLS: a throwaway CA (it signs nothing else, so "holds a certificate it signed" means "is
# part of this cluster"), and a certificate and key per host, with its address as an IP
# subjectAltName (only the chain is verified; the name is for whoever reads the cert).
# The client's is rl-chaos's own: nodes require one of every direct connection.
tls_make() {
    local h
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=rl-netns-ca-$$" -keyout "$work/tls/ca.key" -out "$work/tls/ca.pem" 2> /dev/null
    for h in a b c r1 r2 cl; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$h" \
            -keyout "$work/tls/$h.key" -out "$work/tls/$h.csr" 2> /dev/null
        echo "subjectAltName=IP:${addr[$h]}" > "$work/tls/$h.ext"
        openssl x509 -req -in "$work/tls/$h.csr" -CA "$work/tls/ca.pem" \
            -CAkey "$work/tls/ca.key" -CAcreateserial -days 2 -extfile "$work/tls/$h.ext" \
            -out "$work/tls/$h.pem" 2> /dev/null
    done
    rm -f "$work/tls/"*.csr "$work/tls/"*.ext "$work/tls/ca.key"
}
tls_lines() {
    local n
    [ "$TLS" = 1 ] || return 0
    echo "tls_ca_file $work/tls/ca.pem"
    for n in a b c; do echo "tls node $n $work/tls/$n.pem $work/tls/$n.key"; done
    echo "tls router 1 $work/tls/r1.pem $work/tls/r1.key"
    echo "tls router 2 $work/tls/r2.pem $work/tls/r2.key"
    echo "tls client $work/tls/cl.pem $work/tls/cl.key"
}
if [ "$TLS" = 1 ]; then
    mkdir "$work/tls"
    tls_make
fi

{
    echo "# written by scripts/netns.sh"
    echo "zookeeper $P-zk ${addr[zk]}"
    for n in a b c; do echo "node $n $P-$n ${addr[$n]}"; done
    echo "router 1 $P-r1 ${addr[r1]}"
    echo "router 2 $P-r2 ${addr[r2]}"
    echo "device eth0"
    echo "secret_file $work/cluster.secret"
    echo "token_file $work/chaos.token"
    echo "token_sha256 $sha"
    tls_lines
} > "$work/hosts"

echo "netns: hosts on $SUBNET.0/24 in namespaces $P-*: zk ${addr[zk]}, nodes a b c" \
    "${addr[a]} ${addr[b]} ${addr[c]}, routers ${addr[r1]} ${addr[r2]}, clients ${addr[cl]}," \
    "$([ "$TLS" = 1 ] && echo "mutual TLS on every link" || echo "plaintext (TLS=0)")"
# setpriv: rl-chaos (and so, through the harness, every process it started) dies with
# this script even if the script is SIGKILLed; the next run then removes the namespaces.
pdeath=()
if setpriv --help 2> /dev/null | grep -q pdeathsig; then pdeath=(setpriv --pdeathsig KILL); fi
# The processes' logs go under $work/logs (kept until the teardown): a failing run ends with
# each node's and router's warnings and handoff lines, so a failure in CI can be read.
mkdir -p "$work/logs"
TMPDIR="$work/logs" RL_KEEP_TMP=1 "${pdeath[@]}" ip netns exec "$P-cl" "$BUILD/rl-chaos" run \
    "$SCENARIO" --hosts "$work/hosts" --build "$BUILD" &
chaos_pid=$!

# A plaintext client across namespaces: rl-cli without --tls-ca, from the clients' host to
# router 1 (its client port: the one it listens on at its host's address, found with ss in
# its namespace once it is up) must be refused with the server's "TLS is required".
plain=skipped
if [ "$TLS" = 1 ]; then
    plain="no router 1 listening"
    for _ in $(seq 1 150); do
        port=$(ip netns exec "$P-r1" ss -Hltn src "${addr[r1]}" 2> /dev/null |
            awk '{n = split($4, a, ":"); print a[n]; exit}')
        if [ -n "$port" ]; then
            out=$(ip netns exec "$P-cl" "$BUILD/rl-cli" --target "${addr[r1]}:$port" check api netns-plain \
                2>&1) && prc=0 || prc=$?
            if [ "$prc" != 0 ] && printf '%s' "$out" | grep -q "TLS is required"; then
                plain=ok
                echo "netns: plaintext rl-cli from $P-cl to router 1 ${addr[r1]}:$port refused:" \
                    "$(printf '%s' "$out" | grep -m1 "TLS is required")"
            else
                plain="not refused as expected (exit $prc): $out"
            fi
            break
        fi
        kill -0 "$chaos_pid" 2> /dev/null || break
        sleep 0.1
    done
fi
set +e
wait "$chaos_pid"
rc=$?
set -e
chaos_pid=
if [ "$plain" != ok ] && [ "$plain" != skipped ]; then
    echo "netns: FAIL: a plaintext client to a TLS router: $plain" >&2
    [ "$rc" != 0 ] || rc=1
fi
if [ "$rc" != 0 ]; then
    for f in "$work"/logs/rl-test-*/*.log; do
        [ -e "$f" ] || continue
        echo "log $(basename "$f") (warn, error, handoff; the last 40):"
        grep -E ' (warn|error):|handoff|joining|leaving|registered|signal' "$f" |
            grep -v 'rule(s) with failure' | tail -40 | sed 's/^/  /' || true
    done
fi
exit "$rc"
