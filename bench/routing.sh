#!/usr/bin/env bash
# Upstream routing: what spreading a model over three targets costs, and
# what clients see while one of three upstreams is killed and restarted.
#
#   bench/routing.sh
#
# 1. Overhead: chat (non-stream) at concurrency 32 through the gateway to a
#    model with one target and to a model with three targets (three stub
#    upstream processes), runs interleaved; req/s, latency and gateway CPU
#    per request.
# 2. Fault run: 60 s of chat at concurrency 32 on the three-target model
#    while, every 10 s, one upstream (in turn) is killed with SIGKILL and
#    started again on the same port 5 s later. Counts client errors (goal: 0).
#
# Environment (all optional):
#   BENCH_DURATION=10      measured seconds per overhead run
#   BENCH_FAULT_S=60       seconds of the fault run
#   BENCH_COOLDOWN_S       GATEHOUSE_TARGET_COOLDOWN_S for the gateway (default: its own, 30)
#   BENCH_NO_BUILD=1       use the release binaries already built
#   BENCH_OUT=PATH         raw results (default bench/results/routing.jsonl)
#   CARGO_TARGET_DIR       where the release binaries are
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${BENCH_DURATION:-10}
FAULT_S=${BENCH_FAULT_S:-60}
OUT=${BENCH_OUT:-$ROOT/bench/results/routing.jsonl}
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release

log() { echo "bench: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}
for t in curl jq; do
    command -v "$t" >/dev/null || die "missing $t (apt-get install $t)"
done

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    log "building release binaries"
    (cd "$ROOT" && cargo build --release -q -p gatehouse -p gatehouse-stub-upstream -p gatehouse-loadgen)
fi
for b in stub-upstream loadgen gatehouse; do
    [ -x "$BIN/$b" ] || die "$BIN/$b not built"
done

TMP=$(mktemp -d /tmp/gatehouse-routing-bench.XXXXXX)
declare -A PID
cleanup() {
    local p
    for p in "${PID[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_line() { # FILE PATTERN
    for _ in $(seq 100); do
        grep -m1 "$2" "$1" 2>/dev/null && return
        sleep 0.1
    done
    die "timed out waiting for '$2' in $1: $(cat "$1" 2>/dev/null)"
}

# start_stub I [ADDR]: stub upstream I, on ADDR or a free port; sets STUB_ADDR[I].
declare -A STUB_ADDR
start_stub() {
    local i=$1 listen=${2:-127.0.0.1:0}
    for _ in $(seq 50); do
        "$BIN/stub-upstream" --listen "$listen" --no-record >"$TMP/stub$i.out" 2>&1 &
        PID[stub$i]=$!
        sleep 0.05
        if kill -0 "${PID[stub$i]}" 2>/dev/null; then
            STUB_ADDR[$i]=$(wait_line "$TMP/stub$i.out" '^listening on ' | sed 's/^listening on http:\/\///')
            return
        fi
        sleep 0.1 # the port may still be held for a moment after the kill
    done
    die "stub $i could not listen on $listen: $(cat "$TMP/stub$i.out")"
}
for i in 0 1 2; do start_stub $i; done

ENV=(GATEHOUSE_LISTEN=127.0.0.1:0 GATEHOUSE_DATABASE_URL="sqlite://$TMP/gatehouse.db"
    GATEHOUSE_ADMIN_EMAIL=bench@example.com GATEHOUSE_ADMIN_PASSWORD=bench-password-$RANDOM$RANDOM GATEHOUSE_LOG=warn)
[ -n "${BENCH_COOLDOWN_S:-}" ] && ENV+=(GATEHOUSE_TARGET_COOLDOWN_S="$BENCH_COOLDOWN_S")
env "${ENV[@]}" "$BIN/gatehouse" serve >"$TMP/gatehouse.out" 2>&1 &
PID[gatehouse]=$!
GATEHOUSE=$(wait_line "$TMP/gatehouse.out" 'listening on ' | sed 's/.*listening on //')
PASSWORD=$(printf '%s\n' "${ENV[@]}" | sed -n 's/^GATEHOUSE_ADMIN_PASSWORD=//p')
TOKEN=$(curl -sS --fail-with-body -X POST "$GATEHOUSE/api/auth/jwt/login" \
    --data-urlencode "username=bench@example.com" --data-urlencode "password=$PASSWORD" | jq -r .access_token)
api() { curl -sS --fail-with-body -X "$1" "$GATEHOUSE$2" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d "$3"; }
for i in 0 1 2; do
    api POST /api/admin/providers "{\"name\":\"s$i\",\"type\":\"openai\",\"base_url\":\"http://${STUB_ADDR[$i]}/v1\",\"timeout_s\":5}" >/dev/null
done
api POST /api/admin/models '{"id":"one","kind":"chat","provider":"s0","upstream_model":"bench-chat"}' >/dev/null
api POST /api/admin/models '{"id":"three","kind":"chat","targets":[{"provider":"s0","upstream_model":"bench-chat"},{"provider":"s1","upstream_model":"bench-chat"},{"provider":"s2","upstream_model":"bench-chat"}]}' >/dev/null
KEY=$(api POST /api/api-keys '{"name":"bench"}' | jq -r .key)
log "gatehouse at $GATEHOUSE; stubs at ${STUB_ADDR[*]}"

PROMPT="Summarise the following in one sentence: the quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."
for m in one three; do
    jq -nc --arg p "$PROMPT" --arg m "$m" '{model:$m,messages:[{role:"user",content:$p}]}' >"$TMP/$m.json"
done

HZ=$(getconf CLK_TCK)
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

mkdir -p "$(dirname "$OUT")"
: >"$OUT"
# loadgen MODEL SECONDS: one JSON line with the gateway's CPU seconds added.
run() {
    local c0 c1
    c0=$(cpu_ticks "${PID[gatehouse]}")
    "$BIN/loadgen" --url "$GATEHOUSE/v1/chat/completions" --method POST --body-file "$TMP/$1.json" \
        --header "Authorization: Bearer $KEY" --concurrency 32 --duration "$2" --warmup 2 --timeout 30 \
        --expect-suffix '}' >"$TMP/lg.out" 2>"$TMP/lg.err" || die "loadgen: $(cat "$TMP/lg.err")"
    c1=$(cpu_ticks "${PID[gatehouse]}")
    [ -s "$TMP/lg.err" ] && log "$1: $(cat "$TMP/lg.err")"
    jq -c --arg m "$1" --arg run "$3" --argjson cpu "$(((c1 - c0) * 100 / HZ))" \
        '{run:$run,model:$m} + . + {gateway_cpu_s:($cpu/100),load1:('"$(cut -d' ' -f1 /proc/loadavg)"')}' "$TMP/lg.out" | tee -a "$OUT" >&2
}

log "overhead: one vs three targets, c=32, ${DURATION}s each, twice interleaved"
for _ in 1 2; do
    run one "$DURATION" overhead
    run three "$DURATION" overhead
done

log "fault run: ${FAULT_S}s on three targets, one killed every 10 s and restarted 5 s later"
run three "$FAULT_S" fault &
LG=$!
sleep 2 # loadgen warm-up
n=0
for t in $(seq 10 10 $((FAULT_S - 1))); do
    sleep 5
    i=$((n % 3))
    kill -9 "${PID[stub$i]}" 2>/dev/null || true
    wait "${PID[stub$i]}" 2>/dev/null || true
    log "t=${t}s killed stub $i"
    sleep 5
    start_stub $i "${STUB_ADDR[$i]}"
    log "t=$((t + 5))s restarted stub $i"
    n=$((n + 1))
done
wait $LG

echo
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo
jq -rs '
def f: if . == null then "–" else (. * 1000 | round / 1000 | tostring) end;
"| run | model | req/s | p50 ms | p99 ms | errors | gateway CPU µs/req |",
"|---|---|---:|---:|---:|---:|---:|",
(.[] | "| \(.run) | \(.model) | \(.rps|round) | \(.p50_ms|f) | \(.p99_ms|f) | \(.errors) | \(if .requests > 0 then (.gateway_cpu_s * 1e6 / .requests | round) else "–" end) |")' "$OUT"
echo
curl -sS "$GATEHOUSE/metrics" | grep '^gatehouse_upstream_' || true
log "raw results in $OUT"
