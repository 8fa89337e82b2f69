#!/usr/bin/env bash
# check_install: installs a build into a temporary prefix and uses it as a packager and an
# application would, with nothing of the source tree but examples/c/check.c:
#   - `cmake --install BUILD --prefix TMP` puts the binaries, librlclient (.so with its
#     symlinks, and .a), the public headers, ratelimiter.pc, the example config and the
#     systemd units (and sysusers.d entry) where docs/OPERATIONS.md says;
#   - the headers compile alone and name no internal header; the .so exports only rlc_*;
#   - the units pass `systemd-analyze verify` (skipped when it is not installed);
#   - examples/c/check.c builds out of tree with `pkg-config --cflags --libs ratelimiter`,
#     and once more linking librlclient.a (`pkg-config --static`), and both, run as built
#     (no LD_LIBRARY_PATH: the .pc's RPATH finds librlclient.so.0 in the prefix) against an
#     rl-node and an rl-router started from the INSTALLED binaries, print ALLOWED then
#     LIMITED with 429 and Retry-After; with the router down, the failure policy's 503;
#   - installed under /usr (into a DESTDIR, as a package is built), ratelimiter.pc sets no
#     RPATH.
# Usage (ctest runs it): check_install.sh BUILD_DIR SOURCE_DIR CC "EXTRA_CFLAGS" LIBDIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) cc=$3 extra=${4:-} libdir=${5:-lib}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rl-install-XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    if [ "${RL_KEEP_TMP:-0}" = 1 ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
fail() {
    echo "check_install: FAIL: $*" >&2
    for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
    exit 1
}
step() { echo "check_install: $*"; }

prefix=$tmp/prefix
step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || fail "cmake --install"

step "installed files"
for f in bin/rl-node bin/rl-router bin/rl-cli bin/rl-bench bin/rl-rebalance bin/rl-regions bin/rl-chaos \
    "$libdir/librlclient.a" "$libdir/librlclient.so" include/ratelimiter/ratelimiter.h \
    include/ratelimiter/ratelimiter_uv.h "$libdir/pkgconfig/ratelimiter.pc" \
    lib/systemd/system/rl-node@.service lib/systemd/system/rl-router.service \
    lib/sysusers.d/ratelimiter.conf share/ratelimiter/cluster.conf.example \
    share/ratelimiter/examples/check.c; do
    [ -e "$prefix/$f" ] || fail "$f is not installed"
done
for b in rl-node rl-router rl-cli rl-bench rl-rebalance rl-regions rl-chaos; do
    [ -x "$prefix/bin/$b" ] || fail "bin/$b is not executable"
done
so=$(readlink "$prefix/$libdir/librlclient.so")
[ "$so" = librlclient.so.0 ] || fail "librlclient.so -> $so, not librlclient.so.0"
[ "$(readlink "$prefix/$libdir/librlclient.so.0")" = librlclient.so.0.1.0 ] ||
    fail "librlclient.so.0 does not point to librlclient.so.0.1.0"
[ -f "$prefix/$libdir/librlclient.so.0.1.0" ] || fail "librlclient.so.0.1.0 missing"
readelf -d "$prefix/$libdir/librlclient.so.0.1.0" | grep -q 'SONAME.*\[librlclient.so.0\]' ||
    fail "SONAME is not librlclient.so.0"
[ -z "$(ls "$prefix/include/ratelimiter" | grep -v -x -e ratelimiter.h -e ratelimiter_uv.h)" ] ||
    fail "unexpected headers in include/ratelimiter"

grep -q '^request_log = /var/lib/ratelimiter/router/requests.log' \
    "$prefix/share/ratelimiter/cluster.conf.example" ||
    fail "the installed example's request_log is not in the router unit's state directory"

step "the public headers stand alone"
if grep -n '#include "' "$prefix"/include/ratelimiter/*.h; then
    fail "a public header includes a local header"
fi
# (uv.h itself needs POSIX declarations that strict -std=c11 hides: gnu11 for that one.)
for h in ratelimiter.h:c11 ratelimiter_uv.h:gnu11; do
    printf '#include <ratelimiter/%s>\nint main(void) { return 0; }\n' "${h%%:*}" >"$tmp/h.c"
    $cc -std="${h##*:}" -Wall -Wextra -Werror -Wpedantic -fsyntax-only -I"$prefix/include" \
        "$tmp/h.c" || fail "${h%%:*} does not compile alone"
done

step "librlclient.so exports the API only"
exported=$(nm -D --defined-only "$prefix/$libdir/librlclient.so" | awk '$2 ~ /^[TDBRW]$/ {print $3}')
[ -n "$(grep '^rlc_' <<<"$exported")" ] || fail "no rlc_ symbol exported"
others=$(grep -v -e '^rlc_' -e '^_init$' -e '^_fini$' -e '^__' <<<"$exported" || true)
[ -z "$others" ] || fail "librlclient.so exports internal symbols: $others"

if command -v systemd-analyze >/dev/null 2>&1; then
    step "systemd-analyze verify"
    mkdir -p "$tmp/units"
    # verify wants the ExecStart binaries to exist: point them at the installed ones.
    sed "s|ExecStart=[^ ]*/rl-router|ExecStart=$prefix/bin/rl-router|" \
        "$prefix/lib/systemd/system/rl-router.service" >"$tmp/units/rl-router.service"
    sed "s|ExecStart=[^ ]*/rl-node|ExecStart=$prefix/bin/rl-node|" \
        "$prefix/lib/systemd/system/rl-node@.service" >"$tmp/units/rl-node@a.service"
    (cd "$tmp/units" && systemd-analyze verify --man=no ./rl-router.service ./rl-node@a.service) \
        >"$tmp/verify.log" 2>&1 || fail "systemd-analyze verify: $(cat "$tmp/verify.log")"
    if grep -v -e '^$' "$tmp/verify.log" | grep -q .; then
        fail "systemd-analyze verify complained: $(cat "$tmp/verify.log")"
    fi
    for u in rl-router.service rl-node@a.service; do
        for want in 'NoNewPrivileges=yes' 'ProtectSystem=strict' 'ProtectHome=yes' \
            'PrivateTmp=yes' 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
            'Restart=on-failure' 'ExecReload=/bin/kill -HUP $MAINPID' 'User=ratelimiter'; do
            grep -qxF "$want" "$tmp/units/$u" || fail "$u lacks $want"
        done
    done
    grep -q -- '--config /etc/ratelimiter/cluster.conf --name %i$' "$tmp/units/rl-node@a.service" ||
        fail "rl-node@.service does not start --name %i"
else
    step "systemd-analyze not installed: units not verified"
fi

step "build examples/c/check.c out of tree with pkg-config"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
pkg-config --exists ratelimiter || fail "pkg-config does not find ratelimiter"
[ "$(pkg-config --modversion ratelimiter)" = 0.1.0 ] || fail "ratelimiter.pc version"
mkdir -p "$tmp/app"
cp "$src/examples/c/check.c" "$tmp/app/check.c"
cd "$tmp/app"
# shellcheck disable=SC2046,SC2086
$cc $extra -std=c11 -Wall -Wextra -Werror -o check check.c $(pkg-config --cflags --libs ratelimiter) \
    >"$tmp/cc.log" 2>&1 || fail "cc with pkg-config: $(cat "$tmp/cc.log")"
readelf -d check | grep -q 'NEEDED.*librlclient.so.0' || fail "check does not use librlclient.so.0"
readelf -d check | grep -Eq "(RUNPATH|RPATH).*\[$prefix/" ||
    fail "check has no RPATH to $prefix: $(readelf -d check | grep -i path)"
# Static: librlclient.a, and its dependencies from pkg-config --static.
libs_L=$(pkg-config --static --libs-only-L ratelimiter)
libs_l=$(pkg-config --static --libs-only-l ratelimiter | sed 's/-lrlclient//')
# shellcheck disable=SC2086
$cc $extra -std=c11 -Wall -Wextra -Werror -o check-static check.c \
    $(pkg-config --cflags ratelimiter) $libs_L -Wl,-Bstatic -lrlclient -Wl,-Bdynamic $libs_l \
    >"$tmp/cc-static.log" 2>&1 || fail "cc --static: $(cat "$tmp/cc-static.log")"
if readelf -d check-static | grep -q 'NEEDED.*librlclient'; then
    fail "check-static still needs librlclient.so"
fi

step "run against rl-node and rl-router from the installed binaries"
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {
    for _ in $(seq 1 150); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}
np=$(free_port)
rp=$(free_port)
while [ "$rp" = "$np" ]; do rp=$(free_port); done
cat >"$tmp/cluster.conf" <<CONF
[cluster]
shards = 64
[router]
listen = 127.0.0.1:$rp
[node a]
listen = 127.0.0.1:$np
[service web]
limit = fixed_window 1 per 1h
CONF
"$prefix/bin/rl-node" --config "$tmp/cluster.conf" --name a --metrics off >"$tmp/node.log" 2>&1 &
pids+=($!)
wait_port "$np" || fail "rl-node does not listen"
"$prefix/bin/rl-router" --config "$tmp/cluster.conf" --metrics off >"$tmp/router.log" 2>&1 &
router_pid=$!
pids+=("$router_pid")
wait_port "$rp" || fail "rl-router does not listen"

expect() { # expect NAME OUTPUT LINE-REGEX...
    local name=$1 out=$2 n=1
    shift 2
    for re in "$@"; do
        line=$(sed -n "${n}p" <<<"$out")
        grep -Eqx -- "$re" <<<"$line" || fail "$name line $n: '$line' does not match '$re'
$out"
        n=$((n + 1))
    done
    [ "$(wc -l <<<"$out")" -eq $((n - 1)) ] || fail "$name: more output than expected:
$out"
}
allowed_then_limited=(
    'ALLOWED limit=1 remaining=0 reset_ms=[0-9]+ retry_after_ms=0'
    'HTTP: pass on'
    'RateLimit-Policy: "web";q=1'
    'RateLimit: "web";r=0;t=[0-9]+'
    'LIMITED limit=1 remaining=0 reset_ms=[0-9]+ retry_after_ms=[1-9][0-9]*'
    'HTTP: 429 Too Many Requests'
    'RateLimit-Policy: "web";q=1'
    'RateLimit: "web";r=0;t=[0-9]+'
    'Retry-After: [1-9][0-9]*'
)
unset LD_LIBRARY_PATH
out=$(./check "127.0.0.1:$rp" web alice 2 | tr -d '\r') || fail "check exited $?"
expect check "$out" "${allowed_then_limited[@]}"
out=$(./check-static "127.0.0.1:$rp" web bob 2 | tr -d '\r') || fail "check-static exited $?"
expect check-static "$out" "${allowed_then_limited[@]}"

kill -TERM "$router_pid"
wait "$router_pid" 2>/dev/null || true
set +e
out=$(./check "127.0.0.1:$rp" web carol 1 | tr -d '\r')
rc=$?
set -e
[ "$rc" = 1 ] || fail "check with the router down exited $rc, not 1"
expect "check (router down)" "$out" 'error: connection refused' 'HTTP: 503 Service Unavailable' \
    'Retry-After: 1'

step "under /usr (DESTDIR=$tmp/stage): ratelimiter.pc sets no RPATH"
DESTDIR=$tmp/stage cmake --install "$build" --prefix /usr >"$tmp/install-usr.log" 2>&1 ||
    fail "DESTDIR=$tmp/stage cmake --install --prefix /usr"
usr_pc=$tmp/stage/usr/$libdir/pkgconfig/ratelimiter.pc
grep -q '^Libs: -L${libdir} -lrlclient$' "$usr_pc" || fail "$usr_pc: $(grep '^Libs:' "$usr_pc")"
grep -q 'rpath' "$prefix/$libdir/pkgconfig/ratelimiter.pc" ||
    fail "ratelimiter.pc under $prefix sets no RPATH"
step "ok"
