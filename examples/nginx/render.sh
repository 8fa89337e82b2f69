#!/usr/bin/env bash
# Renders examples/nginx/nginx.conf.in into PREFIX/nginx.conf and creates PREFIX/tmp.
#   examples/nginx/render.sh PREFIX LISTEN_PORT BACKEND_PORT ROUTER_PORT [TIMEOUT_MS] [ROUTER_HOST]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:?usage: render.sh PREFIX LISTEN_PORT BACKEND_PORT ROUTER_PORT [TIMEOUT_MS] [ROUTER_HOST]}
listen=${2:?LISTEN_PORT}; backend=${3:?BACKEND_PORT}; router=${4:?ROUTER_PORT}
timeout=${5:-200}; host=${6:-127.0.0.1}
prefix=$(mkdir -p "$prefix" && cd "$prefix" && pwd)
mkdir -p "$prefix/tmp"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LUA_DIR@|$here/../../clients/lua|g" \
    -e "s|@LISTEN_PORT@|$listen|g" -e "s|@BACKEND_PORT@|$backend|g" \
    -e "s|@ROUTER_PORT@|$router|g" -e "s|@ROUTER_HOST@|$host|g" -e "s|@TIMEOUT_MS@|$timeout|g" \
    "$here/nginx.conf.in" > "$prefix/nginx.conf"
echo "$prefix/nginx.conf"
