#!/usr/bin/env bash
# MCP gateway overhead: tools/call of a trivial tool (`add`) on a real MCP
# server (tests/mcp/servers.py, the `mcp` Python SDK, JSON answers) on
# loopback, straight and through `POST /mcp`; prints the medians and what the
# gateway adds (goal: at most 0.5 ms at the median, docs/performance.md).
#
#   bench/mcp.sh            (BENCH_CALLS=2000, BENCH_RUNS=1 measurements in a row
#                            (one line each), BENCH_NO_BUILD=1 to skip the build,
#                            BENCH_PROFILE=bench for a build without LTO, dev for the
#                            unoptimised test build: an upper bound)
#
# Needs the venv of the tests (.venv with tests/python/requirements.txt), curl, jq.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# BENCH_PROFILE=bench: a quicker build (no LTO) for a first figure.
PROFILE=${BENCH_PROFILE:-release}
DIR=$PROFILE
[ "$PROFILE" = dev ] && DIR=debug
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/$DIR
PY=${GATEHOUSE_TEST_PYTHON:-$ROOT/.venv/bin/python}
CALLS=${BENCH_CALLS:-2000}
RUNS=${BENCH_RUNS:-1}
[ -x "$PY" ] || { echo "bench: $PY missing (make the tests' venv)" >&2; exit 1; }
if [ -z "${BENCH_NO_BUILD:-}" ]; then
    (cd "$ROOT" && cargo build --profile "$PROFILE" -q -p gatehouse)
fi

TMP=$(mktemp -d /tmp/gatehouse-mcp-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

"$PY" "$ROOT/tests/mcp/servers.py" alpha --json --stateless >"$TMP/up.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^PORT' "$TMP/up.out" && break; sleep 0.1; done
UP="http://127.0.0.1:$(awk '/^PORT/{print $2}' "$TMP/up.out")/mcp"

PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
GW="http://127.0.0.1:$PORT"
GATEHOUSE_LISTEN=127.0.0.1:$PORT GATEHOUSE_DATABASE_URL="sqlite://$TMP/g.db" \
    GATEHOUSE_ADMIN_EMAIL=admin@example.com GATEHOUSE_ADMIN_PASSWORD=bench-password-1 \
    GATEHOUSE_LOG=warn "$BIN/gatehouse" serve >"$TMP/gw.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do curl -sf "$GW/healthz" >/dev/null && break; sleep 0.1; done

ADMIN=$(curl -sf "$GW/api/auth/jwt/login" -d 'username=admin@example.com&password=bench-password-1' | jq -r .access_token)
H=(-H "Authorization: Bearer $ADMIN" -H 'content-type: application/json')
curl -sf "${H[@]}" "$GW/api/admin/mcp-servers" -d "{\"name\":\"alpha\",\"url\":\"$UP\"}" >/dev/null
ME=$(curl -sf "${H[@]}" "$GW/api/users/me" | jq -r .id)
curl -sf -X PATCH "${H[@]}" "$GW/api/admin/users/$ME" -d '{"mcp":{"servers":["*"]}}' >/dev/null
KEY=$(curl -sf "${H[@]}" "$GW/api/api-keys" -d '{"name":"bench","mcp":{"servers":["*"]}}' | jq -r .key)

for _ in $(seq "$RUNS"); do
    "$PY" "$ROOT/bench/mcp_latency.py" "$UP" "$GW/mcp" "$KEY" "$CALLS"
done
