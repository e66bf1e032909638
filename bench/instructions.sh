#!/usr/bin/env bash
# Instructions per request of the gateway, counted by valgrind's callgrind:
# a figure that does not move with the machine's load (bench/run.sh measures
# CPU time, which does), for comparing the dialects' translations with plain
# chat while other work shares the cores. User-space instructions only: the
# kernel's share (reads, writes, epoll) is not counted, and is the same for
# workloads that make the same reads and writes.
#
#   bench/instructions.sh [WORKLOAD...]   (default: chat chat-stream messages
#                                          messages-stream messages-passthrough
#                                          messages-passthrough-stream responses
#                                          responses-stream; also chat-priced, chat
#                                          to a priced model, and chat-budget, the
#                                          same under a key with a day's and a
#                                          month's budget)
#
# Environment: BENCH_CALLS=200 requests per workload (one keep-alive
# connection, after 20 unmeasured ones), BENCH_PROFILE=release|bench (the
# binaries' profile; bench builds without LTO, faster), BENCH_NO_BUILD=1,
# BENCH_CALLGRIND_OUT=DIR to keep the callgrind files (for callgrind_annotate).
# Needs valgrind, curl, jq and python3.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROFILE=${BENCH_PROFILE:-release}
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
CALLS=${BENCH_CALLS:-200}
WORKLOADS=${*:-chat chat-stream messages messages-stream messages-passthrough messages-passthrough-stream responses responses-stream}
die() { echo "instructions: $*" >&2; exit 1; }
command -v valgrind >/dev/null || die "valgrind missing (apt-get install valgrind)"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
    (cd "$ROOT" && cargo build --profile "$PROFILE" -q -p gatehouse -p gatehouse-stub-upstream)
fi

TMP=$(mktemp -d /tmp/gatehouse-instructions.XXXXXX)
OUTDIR=${BENCH_CALLGRIND_OUT:-$TMP}
mkdir -p "$OUTDIR"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
wait_line() { # FILE PATTERN
    for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && { grep -m1 "$2" "$1"; return; }; sleep 0.1; done
    die "no '$2' in $1: $(tail -5 "$1")"
}

"$BIN/stub-upstream" --listen 127.0.0.1:0 --no-record >"$TMP/stub.out" 2>&1 &
PIDS+=($!)
STUB=$(wait_line "$TMP/stub.out" '^listening on ' | sed 's/^listening on //')

ADMIN=bench@example.com
PASSWORD=bench-password-$RANDOM$RANDOM
# Instrumentation starts off (and runs near full speed): only the measured
# requests are counted.
GATEHOUSE_LISTEN=127.0.0.1:0 GATEHOUSE_DATABASE_URL="sqlite://$TMP/gatehouse.db" \
    GATEHOUSE_ADMIN_EMAIL=$ADMIN GATEHOUSE_ADMIN_PASSWORD=$PASSWORD GATEHOUSE_LOG=warn \
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUTDIR/callgrind.%p" \
    "$BIN/gatehouse" serve >"$TMP/gatehouse.out" 2>&1 &
GW_PID=$!
PIDS+=($GW_PID)
GATEHOUSE=$(wait_line "$TMP/gatehouse.out" 'listening on ' | sed 's/.*listening on //')
TOKEN=$(curl -sS --fail-with-body -X POST "$GATEHOUSE/api/auth/jwt/login" \
    --data-urlencode "username=$ADMIN" --data-urlencode "password=$PASSWORD" | jq -r .access_token)
api() { curl -sS --fail-with-body -X "$1" "$GATEHOUSE$2" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' -d "$3" >/dev/null; }
api POST /api/admin/providers "{\"name\":\"stub\",\"type\":\"openai\",\"base_url\":\"$STUB/v1\"}"
api POST /api/admin/models '{"id":"bench-chat","kind":"chat","provider":"stub","upstream_model":"bench-chat"}'
api POST /api/admin/providers "{\"name\":\"stub-anthropic\",\"type\":\"anthropic\",\"base_url\":\"$STUB\",\"api_key\":\"bench\"}"
api POST /api/admin/models '{"id":"bench-claude","kind":"chat","provider":"stub-anthropic","upstream_model":"bench-claude"}'
api POST /api/admin/models '{"id":"bench-paid","kind":"chat","provider":"stub","upstream_model":"bench-paid"}'
api PUT /api/admin/prices/stub/bench-paid '{"input":"0.15","output":"0.60","cache_read":"0.075","request":"0.0001"}'
new_key() { curl -sS --fail-with-body -X POST "$GATEHOUSE/api/api-keys" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' -d "$1" | jq -r .key; }
KEY=$(new_key '{"name":"bench"}')
# Budgets far above what a run spends: admission reserves and settles, never refuses.
BUDGET_KEY=$(new_key '{"name":"bench","limits":{"budget_per_day":"1000000","budget_per_month":"1000000"}}')

# The bodies of bench/run.sh.
PROMPT="Summarise the following in one sentence: the quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."
jq -nc --arg p "$PROMPT" '{model:"bench-chat",messages:[{role:"system",content:"You are terse."},{role:"user",content:$p}]}' >"$TMP/chat.json"
jq -c '. + {stream:true}' "$TMP/chat.json" >"$TMP/chat-stream.json"
jq -c '.model = "bench-paid"' "$TMP/chat.json" >"$TMP/chat-priced.json"
cp "$TMP/chat-priced.json" "$TMP/chat-budget.json"
jq -nc --arg p "$PROMPT" '{model:"bench-chat",store:false,include:["reasoning.encrypted_content"],
    input:[{type:"message",role:"developer",content:[{type:"input_text",text:"You are terse."}]},
           {type:"message",role:"user",content:[{type:"input_text",text:$p}]}]}' >"$TMP/responses.json"
jq -c '. + {stream:true}' "$TMP/responses.json" >"$TMP/responses-stream.json"
jq -nc --arg p "$PROMPT" '{model:"bench-chat",max_tokens:256,system:"You are terse.",messages:[{role:"user",content:$p}]}' >"$TMP/messages.json"
jq -c '. + {stream:true}' "$TMP/messages.json" >"$TMP/messages-stream.json"
jq -c '.model = "bench-claude"' "$TMP/messages.json" >"$TMP/messages-passthrough.json"
jq -c '.model = "bench-claude"' "$TMP/messages-stream.json" >"$TMP/messages-passthrough-stream.json"
path_of() {
    case $1 in
    chat | chat-stream | chat-priced | chat-budget) echo /v1/chat/completions ;;
    responses | responses-stream) echo /v1/responses ;;
    messages*) echo /v1/messages ;;
    *) die "unknown workload $1" ;;
    esac
}

# N requests on one keep-alive connection; each answer read to its end.
cat >"$TMP/send.py" <<'EOF'
import http.client, sys, urllib.parse
url, path, key, body_file, n = sys.argv[1:6]
body = open(body_file, "rb").read()
u = urllib.parse.urlparse(url)
c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
for _ in range(int(n)):
    c.request("POST", path, body, {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        sys.exit(f"{path}: HTTP {r.status}: {data[:300]!r}")
EOF

total_of() { # callgrind file: its instruction count (the totals line)
    awk '/^totals:/ {print $2}' "$1"
}
echo "| workload | requests | instructions per request |"
echo "|---|---:|---:|"
for w in $WORKLOADS; do
    path=$(path_of "$w")
    key=$KEY
    [ "$w" = chat-budget ] && key=$BUDGET_KEY
    python3 "$TMP/send.py" "$GATEHOUSE" "$path" "$key" "$TMP/$w.json" 20
    callgrind_control -z "$GW_PID" >/dev/null 2>&1
    callgrind_control -i on "$GW_PID" >/dev/null 2>&1
    python3 "$TMP/send.py" "$GATEHOUSE" "$path" "$key" "$TMP/$w.json" "$CALLS"
    callgrind_control -i off "$GW_PID" >/dev/null 2>&1
    callgrind_control -d "$w" "$GW_PID" >/dev/null 2>&1
    sleep 0.5
    f=$(ls -t "$OUTDIR"/callgrind.$GW_PID.* 2>/dev/null | head -1)
    [ -n "$f" ] || die "no callgrind dump for $w"
    ir=$(total_of "$f")
    [ -n "$ir" ] || die "no summary in $f"
    echo "| $w | $CALLS | $((ir / CALLS)) |"
    [ -n "${BENCH_CALLGRIND_OUT:-}" ] && mv "$f" "$OUTDIR/$w.callgrind" || rm -f "$f"
done
