#!/usr/bin/env bash
# Two workloads measured at the same moment, each on a gateway of its own:
# what one costs beyond the other, in CPU per request, with the machine's
# drift taken out. bench/run.sh measures workloads one after another, and on
# a shared virtual machine their CPU per request moves by 5 µs and more
# from one run to the next: more than a small difference such as pricing's.
# Here both gateways run the same binary on the same stub, each with its
# own SQLite database and a load generator of its own at the same fixed
# rate, and they swap workloads every repeat (so a difference between the
# two processes cancels out).
#
#   bench/side_by_side.sh [A [B]]   (default: chat chat-budget)
#
# Workloads: chat (an unpriced model, a key without limits), chat-priced (a
# priced model, the same key), chat-budget (the priced model, a key with a
# day's and a month's budget). The price and the budgets are bench/run.sh's.
#
# Environment: BENCH_RUNS=20 repeats, BENCH_DURATION=6 measured seconds
# (after BENCH_WARMUP=1), BENCH_RATE=6000 requests a second to each gateway,
# BENCH_CONCURRENCY=32 connections each, BENCH_NO_BUILD=1,
# BENCH_OUT=bench/results/side-by-side.jsonl (raw lines, bench/run.sh's
# fields). Prints bench/compare.py's table of B against A.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
A=${1:-chat}
B=${2:-chat-budget}
RUNS=${BENCH_RUNS:-20}
DURATION=${BENCH_DURATION:-6}
WARMUP=${BENCH_WARMUP:-1}
RATE=${BENCH_RATE:-6000}
CONCURRENCY=${BENCH_CONCURRENCY:-32}
OUT=${BENCH_OUT:-$ROOT/bench/results/side-by-side.jsonl}
say() { echo "side-by-side: $*" >&2; }
die() { say "error: $*"; exit 1; }
for w in "$A" "$B"; do
    case $w in chat | chat-priced | chat-budget) ;; *) die "unknown workload $w (chat, chat-priced, chat-budget)" ;; esac
done
[ "$A" != "$B" ] || die "two different workloads, please"
command -v jq >/dev/null || die "jq missing (apt-get install jq)"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p gatehouse -p gatehouse-stub-upstream -p gatehouse-loadgen)
fi

TMP=$(mktemp -d /tmp/gatehouse-side.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
# wait_line, cpu_ticks, stat_field, db_ticks and HZ.
# shellcheck source=bench/proc.sh
. "$ROOT/bench/proc.sh"
# ticks PID: the process's CPU and its kernel and SQLite threads' shares.
ticks() { echo "$(cpu_ticks "$1") $(stat_field 13 "$1") $(db_ticks "$1")"; }

"$BIN/stub-upstream" --listen 127.0.0.1:0 --no-record >"$TMP/stub.out" 2>&1 &
PIDS+=($!)
STUB=$(wait_line "$TMP/stub.out" '^listening on ' | sed 's/^listening on //')

PRICE='{"input":"0.15","output":"0.60","cache_read":"0.075","reasoning":"0.60","request":"0.0001",
    "tiers":[{"above_prompt_tokens":128000,"input":"0.30","output":"1.20"}]}'
URL=()
GW_PID=()
KEY=()
BUDGET_KEY=()
for g in 0 1; do
    password=bench-password-$RANDOM$RANDOM
    GATEHOUSE_LISTEN=127.0.0.1:0 GATEHOUSE_DATABASE_URL="sqlite://$TMP/gateway$g.db" \
        GATEHOUSE_ADMIN_EMAIL=bench@example.com GATEHOUSE_ADMIN_PASSWORD=$password GATEHOUSE_LOG=warn \
        "$BIN/gatehouse" serve >"$TMP/gateway$g.out" 2>&1 &
    GW_PID+=($!)
    PIDS+=($!)
    url=$(wait_line "$TMP/gateway$g.out" 'listening on ' | sed 's/.*listening on //')
    URL+=("$url")
    token=$(curl -sS --fail-with-body -X POST "$url/api/auth/jwt/login" \
        --data-urlencode username=bench@example.com --data-urlencode "password=$password" | jq -r .access_token)
    call() { curl -sS --fail-with-body -X "$1" "$url$2" -H "Authorization: Bearer $token" \
        -H 'Content-Type: application/json' -d "$3"; }
    call POST /api/admin/providers "{\"name\":\"stub\",\"type\":\"openai\",\"base_url\":\"$STUB/v1\"}" >/dev/null
    # The priced model's name is as long as bench-chat's (bench/run.sh).
    for m in bench-chat bench-paid; do
        call POST /api/admin/models "{\"id\":\"$m\",\"kind\":\"chat\",\"provider\":\"stub\",\"upstream_model\":\"$m\"}" >/dev/null
    done
    call PUT /api/admin/prices/stub/bench-paid "$PRICE" >/dev/null
    KEY+=("$(call POST /api/api-keys '{"name":"bench"}' | jq -r .key)")
    BUDGET_KEY+=("$(call POST /api/api-keys \
        '{"name":"bench","limits":{"budget_per_day":"1000000","budget_per_month":"1000000"}}' | jq -r .key)")
done

PROMPT="Summarise the following in one sentence: the quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."
jq -nc --arg p "$PROMPT" '{model:"bench-chat",messages:[{role:"system",content:"You are terse."},{role:"user",content:$p}]}' >"$TMP/chat.json"
jq -c '.model = "bench-paid"' "$TMP/chat.json" >"$TMP/chat-priced.json"
cp "$TMP/chat-priced.json" "$TMP/chat-budget.json"
key_for() { # WORKLOAD GATEWAY
    if [ "$1" = chat-budget ]; then echo "${BUDGET_KEY[$2]}"; else echo "${KEY[$2]}"; fi
}

mkdir -p "$(dirname "$OUT")"
: >"$OUT"
say "$RUNS repeats of ${WARMUP}s + ${DURATION}s, $A and $B side by side at $RATE requests/s each, concurrency $CONCURRENCY"
for r in $(seq "$RUNS"); do
    # Odd repeats: A on gateway 0; even ones: A on gateway 1.
    if [ $((r % 2)) = 1 ]; then on=("$A" "$B"); else on=("$B" "$A"); fi
    lg=()
    for g in 0 1; do
        w=${on[$g]}
        "$BIN/loadgen" --url "${URL[$g]}/v1/chat/completions" --method POST --body-file "$TMP/$w.json" \
            --header "Authorization: Bearer $(key_for "$w" "$g")" --concurrency "$CONCURRENCY" \
            --duration "$DURATION" --warmup "$WARMUP" --rate "$RATE" >"$TMP/lg$g.out" 2>"$TMP/lg$g.err" &
        lg+=($!)
    done
    sleep "$WARMUP"
    before=()
    for g in 0 1; do before+=("$(ticks "${GW_PID[$g]}")"); done
    for g in 0 1; do wait "${lg[$g]}" || die "loadgen failed: $(cat "$TMP/lg$g.err")"; done
    for g in 0 1; do
        read -r cpu0 sys0 db0 <<<"${before[$g]}"
        read -r cpu1 sys1 db1 <<<"$(ticks "${GW_PID[$g]}")"
        jq -c --arg w "${on[$g]}" --argjson run "$r" --argjson g "$g" \
            --argjson cpu $((cpu1 - cpu0)) --argjson sys $((sys1 - sys0)) \
            --argjson db $((db1 - db0)) --argjson hz "$HZ" \
            '{target:"gatehouse",workload:$w,run:$run,gateway:$g,loadgen:"loadgen"} + .
             + {proxy_cpu_s:($cpu/$hz),proxy_sys_s:($sys/$hz),proxy_db_s:($db/$hz)}' "$TMP/lg$g.out" >>"$OUT"
    done
    say "repeat $r of $RUNS: $(jq -rs 'map("\(.workload) \(.proxy_cpu_s / .requests * 1e6 * 10 | round / 10) µs") | join(", ")' <(tail -2 "$OUT"))"
done
"$ROOT/bench/compare.py" --base "$A" "$OUT"
