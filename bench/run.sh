#!/usr/bin/env bash
# Gatehouse throughput and added latency against a fast stub upstream, called
# directly, through nginx (plain reverse proxy with upstream keep-alive: the
# floor for one proxy hop) and through the gateway; all on 127.0.0.1.
#
#   bench/run.sh
#
# Workloads: chat (non-stream), chat-stream (SSE; TTFB and full time; the stub
# writes the whole stream at once, so its first byte waits for every event of
# that read: the gateway writes once per upstream read), chat-stream-paced (at
# concurrency 1 only: the stub sends one event a millisecond, as a model does,
# so TTFB is the first event's own trip through each target; its full time is
# not compared: the gateway asks the upstream for a usage event, one more
# millisecond),
# embeddings (8 inputs), rerank (8 documents), and agent-chat (the agent chat
# route with a device's access token: an agent with a tool contract, tool mode
# `ask`, conversation and turn headers, a manifest of 20 tools, 20 tools
# offered; direct and nginx get the same body on /v1/chat/completions),
# responses and responses-stream (POST /v1/responses as Codex sends it, bridged
# by the gateway to chat completions; direct and nginx send the same body to the
# stub's own /v1/responses),
# messages and messages-stream (Anthropic's /v1/messages translated to the
# OpenAI stub, plain and streamed; direct and nginx get the same body, which
# the stub reads as chat, on /v1/chat/completions),
# messages-passthrough and messages-passthrough-stream (the same Messages
# bodies to a model on an `anthropic` provider: the gateway passes the body
# through to the stub's own /v1/messages, which answers in Messages; direct
# and nginx send them to the stub's /v1/messages),
# chat-priced (chat to a model with a price: cache, reasoning, a request fee
# and a tier; compare with chat for what pricing a request costs) and
# chat-budget (the same, with an API key that has a day's and a month's
# budget far above what the run spends: reservation at admission and
# settlement; compare with chat-priced; skipped, with a note, when the
# gateway has no budgets); direct and nginx get chat's body; each
# at concurrency 1 and 32, one keep-alive connection per concurrent client. Prints Markdown tables and writes raw JSON
# lines to bench/results/latest.jsonl.
#
# Environment (all optional):
#   BENCH_DURATION=10      measured seconds per run
#   BENCH_WARMUP=2         warm-up seconds per run
#   BENCH_CONCURRENCY="1 32"
#   BENCH_TARGETS="direct nginx gatehouse"
#                          add `hyper` for the floor of a hop built as the gateway
#                          is (examples/hyper_floor.rs: hyper server and client,
#                          one runtime per core, nothing else)
#   BENCH_WORKLOADS="chat chat-priced chat-budget chat-stream chat-stream-paced embeddings rerank agent-chat messages messages-stream messages-passthrough messages-passthrough-stream responses responses-stream"
#   BENCH_NGINX_WORKERS=1  nginx worker_processes
#   BENCH_LOADGEN_THREADS=1  load generator runtime threads
#   BENCH_RATE=R           our loadgen only: R requests a second in all, on a fixed
#                          schedule (default: closed loop, as fast as answered).
#                          Workloads compared at one rate get the same load;
#                          closed, a slower one also gets fewer requests per
#                          wake-up, which raises every process's CPU per request
#                          (the stub's too). A run short of R is flagged
#   BENCH_LOADGEN=wrk      a second load generator: wrk (Debian's package) instead of
#                          our loadgen, to check a figure against another tool
#                          (no TTFB; one wrk thread, same connections and bodies)
#   BENCH_LOADGEN=oha      a third: oha (crates.io; installed with `cargo install oha
#                          --locked` into target/bench-tools when missing), the tool
#                          outside harnesses use; same connections and bodies; its
#                          runtime threads are oha's default (one per physical core)
#                          unless BENCH_LOADGEN_THREADS is set
#   BENCH_ORDER=interleaved  each repeat runs every workload once, each repeat
#                          starting one workload further along the list
#                          (default: a workload's repeats one after another);
#                          for comparing workloads with one another
#   BENCH_RUNS=1           repeat each measurement this many times, targets
#                          alternated within each repeat; the tables give the
#                          median and the spread (min–max), the JSONL every run
#   BENCH_ACCESS_LOG=1     access logs on for both proxies, each written to a file
#                          (nginx `access_log` to a file, unbuffered; the gateway at
#                          GATEHOUSE_LOG=info, its access lines to stdout redirected
#                          to a file); by default both are off (nginx `access_log off`,
#                          the gateway at GATEHOUSE_LOG=warn, so no access line is made)
#   BENCH_NO_BUILD=1       use the release binaries already built
#   BENCH_OUT=PATH         raw results (default bench/results/latest.jsonl)
#   BENCH_KEY_LIMITS=JSON  `limits` of the gateway's API key (default none), e.g.
#                          '{"requests_per_minute":100000000,"tokens_per_minute":100000000000,
#                            "tokens_per_day":100000000000000,"max_parallel":100000}'
#                          to measure what checking limits costs
#   BENCH_PRICE=1          set a price (with cache, reasoning, a request fee and a tier)
#                          on every stub model, to measure what pricing each request costs
#                          (compare chat with and without it; docs/spend.md)
#   BENCH_OTLP=1           export the gateway's traces (OTLP/HTTP, every request
#                          sampled) to a local collector (a second stub-upstream,
#                          which accepts and drops them), to measure what tracing costs
#   BENCH_OTLP_SAMPLER=always_on  with BENCH_OTLP: OTEL_TRACES_SAMPLER (e.g. traceidratio,
#   BENCH_OTLP_SAMPLER_ARG=1.0     with ..._ARG=0.1; always_off: spans made, none exported)
#   BENCH_SMAPS=PATH       copy the gateway's /proc/PID/smaps there at the end
#   CARGO_TARGET_DIR       where the release binaries are
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${BENCH_DURATION:-10}
WARMUP=${BENCH_WARMUP:-2}
CONCURRENCY=${BENCH_CONCURRENCY:-"1 32"}
TARGETS=${BENCH_TARGETS:-"direct nginx gatehouse"}
WORKLOADS=${BENCH_WORKLOADS:-"chat chat-priced chat-budget chat-stream chat-stream-paced embeddings rerank agent-chat messages messages-stream messages-passthrough messages-passthrough-stream responses responses-stream"}
NGINX_WORKERS=${BENCH_NGINX_WORKERS:-1}
LOADGEN_THREADS=${BENCH_LOADGEN_THREADS:-1}
LOADGEN=${BENCH_LOADGEN:-loadgen}
RUNS=${BENCH_RUNS:-1}
ACCESS_LOG=${BENCH_ACCESS_LOG:-}
case $LOADGEN in loadgen | wrk | oha) ;; *) echo "bench: BENCH_LOADGEN must be loadgen, wrk or oha" >&2 && exit 2 ;; esac
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "bench: BENCH_RUNS must be a positive number" >&2 && exit 2; }
if [ -n "${BENCH_RATE:-}" ]; then
    [[ $BENCH_RATE =~ ^[1-9][0-9]*$ ]] || { echo "bench: BENCH_RATE must be a positive number of requests a second" >&2 && exit 2; }
    [ "$LOADGEN" = loadgen ] || { echo "bench: BENCH_RATE paces our loadgen only" >&2 && exit 2; }
fi
OUT=${BENCH_OUT:-$ROOT/bench/results/latest.jsonl}
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release

log() { echo "bench: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# --- tools -----------------------------------------------------------------

need_apt=()
command -v curl >/dev/null || need_apt+=(curl)
command -v jq >/dev/null || need_apt+=(jq)
[ "$LOADGEN" != wrk ] || command -v wrk >/dev/null || need_apt+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
if [ ${#need_apt[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "missing ${need_apt[*]}: install them (apt-get install ${need_apt[*]})"
    log "installing ${need_apt[*]}"
    # Keep Debian's maintainer scripts from starting a system-wide nginx.
    made_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq "${need_apt[@]}" >/dev/null; then
        apt-get update -qq
        apt-get install -y -qq "${need_apt[@]}" >/dev/null ||
            apt-get install -y -qq "${need_apt[@]/nginx-light/nginx}" >/dev/null
    fi
    [ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

# oha, pinned, in a directory of its own under target/ (never a hand install).
OHA_VERSION=1.16.0
OHA=$ROOT/target/bench-tools/bin/oha
if [ "$LOADGEN" = oha ] && ! "$OHA" --version 2>/dev/null | grep -qF " $OHA_VERSION"; then
    log "installing oha $OHA_VERSION into $ROOT/target/bench-tools (a few minutes, once)"
    cargo install oha --locked --version "$OHA_VERSION" --root "$ROOT/target/bench-tools" -q ||
        die "cargo install oha failed"
fi

if [ -z "${BENCH_NO_BUILD:-}" ]; then
    log "building release binaries"
    (cd "$ROOT" && cargo build --release -q -p gatehouse -p gatehouse-stub-upstream -p gatehouse-loadgen)
    if [[ " $TARGETS " == *" hyper "* ]]; then
        (cd "$ROOT" && cargo build --release -q --example hyper_floor)
    fi
fi
for b in stub-upstream loadgen $([[ " $TARGETS " == *" gatehouse "* ]] && echo gatehouse) \
    $([[ " $TARGETS " == *" hyper "* ]] && echo examples/hyper_floor); do
    [ -x "$BIN/$b" ] || die "$BIN/$b not built"
done

# --- processes ---------------------------------------------------------------

TMP=$(mktemp -d /tmp/gatehouse-bench.XXXXXX)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        # Bounded wait: the servers stop within a second or two.
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A TCP port on 127.0.0.1 that nothing answers on.
free_port() {
    local p
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
    die "no free port"
}

# wait_line, cpu_ticks, stat_field, db_ticks and HZ.
# shellcheck source=bench/proc.sh
. "$ROOT/bench/proc.sh"

log "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); load $(cut -d' ' -f1-3 /proc/loadavg)"

# Stub upstream.
"$BIN/stub-upstream" --listen 127.0.0.1:0 --no-record >"$TMP/stub.out" 2>&1 &
STUB_PID=$!
PIDS+=($STUB_PID)
STUB=$(wait_line "$TMP/stub.out" '^listening on ' | sed 's/^listening on //')
STUB_PORT=${STUB##*:}
log "stub upstream at $STUB"
# The paced stream's model: one event a millisecond, 16 characters each.
curl -sS --fail-with-body -X POST "$STUB/_stub/script" -H 'Content-Type: application/json' \
    -d '{"model":"bench-chat-paced","script":{"chunk_interval_ms":1,"chunk_size":16}}' >/dev/null

# A local OTLP collector for the gateway's traces (BENCH_OTLP=1).
OTEL_ENV=()
if [ -n "${BENCH_OTLP:-}" ]; then
    "$BIN/stub-upstream" --listen 127.0.0.1:0 --no-record >"$TMP/otlp.out" 2>&1 &
    PIDS+=($!)
    OTLP=$(wait_line "$TMP/otlp.out" '^listening on ' | sed 's/^listening on //')
    OTEL_ENV=(OTEL_EXPORTER_OTLP_ENDPOINT="$OTLP" OTEL_TRACES_SAMPLER="${BENCH_OTLP_SAMPLER:-always_on}"
        OTEL_TRACES_SAMPLER_ARG="${BENCH_OTLP_SAMPLER_ARG:-1.0}")
    log "traces exported to $OTLP/v1/traces"
fi

# nginx as a plain reverse proxy with upstream keep-alive.
NGINX_PORT=$(free_port)
mkdir -p "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes $NGINX_WORKERS;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events {
    worker_connections 4096;
}
http {
    access_log $([ -n "$ACCESS_LOG" ] && echo "$TMP/nginx/access.log" || echo off);
    client_body_temp_path $TMP/nginx/client_body;
    proxy_temp_path $TMP/nginx/proxy;
    keepalive_requests 100000000;
    keepalive_timeout 120s;
    upstream stub {
        server 127.0.0.1:$STUB_PORT;
        keepalive 64;
        keepalive_requests 100000000;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://stub;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
if [[ " $TARGETS " == *" nginx "* ]]; then
    "$NGINX" -e "$TMP/nginx/error.log" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" >"$TMP/nginx/out" 2>&1 &
    NGINX_PID=$!
    PIDS+=($NGINX_PID)
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$NGINX_PORT/v1/models" && break
        kill -0 "${PIDS[-1]}" 2>/dev/null || die "nginx exited: $(cat "$TMP/nginx/out" "$TMP/nginx/error.log" 2>/dev/null)"
        sleep 0.1
    done
    log "nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') at http://127.0.0.1:$NGINX_PORT ($NGINX_WORKERS worker)"
fi

# The floor of a hop built with the gateway's HTTP machinery and nothing else.
if [[ " $TARGETS " == *" hyper "* ]]; then
    "$BIN/examples/hyper_floor" 127.0.0.1:0 "$STUB" >"$TMP/hyper.out" 2>&1 &
    HYPER_PID=$!
    PIDS+=($HYPER_PID)
    HYPER=$(wait_line "$TMP/hyper.out" '^listening on ' | sed 's/^listening on //')
    log "hyper floor at $HYPER"
fi

# The gateway: fresh SQLite, a provider pointing at the stub, a chat model,
# an embeddings model and an API key, all set up over HTTP.
GATEHOUSE_OK=
if [[ " $TARGETS " == *" gatehouse "* ]]; then
    ADMIN=bench@example.com
    PASSWORD=bench-password-$RANDOM$RANDOM
    GATEHOUSE_LISTEN=127.0.0.1:0 \
        GATEHOUSE_DATABASE_URL="sqlite://$TMP/gatehouse.db" \
        GATEHOUSE_ADMIN_EMAIL=$ADMIN GATEHOUSE_ADMIN_PASSWORD=$PASSWORD \
        GATEHOUSE_LOG=$([ -n "$ACCESS_LOG" ] && echo 'info,sqlx=warn' || echo warn) GATEHOUSE_ACCESS_TOKEN_TTL=86400 \
        env "${OTEL_ENV[@]}" "$BIN/gatehouse" serve >"$TMP/gatehouse.out" 2>&1 &
    GATEHOUSE_PID=$!
    PIDS+=($GATEHOUSE_PID)
    GATEHOUSE=$(wait_line "$TMP/gatehouse.out" 'listening on ' | sed 's/.*listening on //')
    log "gatehouse at $GATEHOUSE"
    api() { # METHOD PATH JSON
        curl -sS --fail-with-body -X "$1" "$GATEHOUSE$2" -H "Authorization: Bearer $TOKEN" \
            -H 'Content-Type: application/json' -d "$3"
    }
    login() {
        curl -sS --fail-with-body -X POST "$GATEHOUSE/api/auth/jwt/login" \
            --data-urlencode "username=$ADMIN" --data-urlencode "password=$PASSWORD" | jq -r .access_token
    }
    TOKEN=$(login)
    api POST /api/admin/providers "{\"name\":\"stub\",\"type\":\"openai\",\"base_url\":\"$STUB/v1\"}" >/dev/null
    api POST /api/admin/models '{"id":"bench-chat","kind":"chat","provider":"stub","upstream_model":"bench-chat"}' >/dev/null
    api POST /api/admin/models '{"id":"bench-chat-paced","kind":"chat","provider":"stub","upstream_model":"bench-chat-paced"}' >/dev/null
    # Messages passed through: an anthropic provider on the stub's root.
    api POST /api/admin/providers "{\"name\":\"stub-anthropic\",\"type\":\"anthropic\",\"base_url\":\"$STUB\",\"api_key\":\"bench\"}" >/dev/null
    api POST /api/admin/models '{"id":"bench-claude","kind":"chat","provider":"stub-anthropic","upstream_model":"bench-claude"}' >/dev/null
    api POST /api/admin/models '{"id":"bench-embed","kind":"embeddings","provider":"stub","upstream_model":"bench-embed"}' >/dev/null
    KEY=$(api POST /api/api-keys "{\"name\":\"bench\",\"limits\":${BENCH_KEY_LIMITS:-null}}" | jq -r .key)
    [ -n "$KEY" ] && [ "$KEY" != null ] || die "no API key"
    api POST /api/admin/models '{"id":"bench-rerank","kind":"scoring","provider":"stub","upstream_model":"bench-rerank"}' >/dev/null
    PRICE='{"input":"0.15","output":"0.60","cache_read":"0.075","reasoning":"0.60","request":"0.0001",
        "tiers":[{"above_prompt_tokens":128000,"input":"0.30","output":"1.20"}]}'
    if [ -n "${BENCH_PRICE:-}" ]; then
        for m in bench-chat bench-chat-paced bench-embed bench-rerank; do
            api PUT "/api/admin/prices/stub/$m" "$PRICE" >/dev/null
        done
        log "prices set on every stub model"
    fi
    # chat-priced and chat-budget: a model of their own, always priced, named
    # as long as bench-chat (the name is in the bodies, the answers and the
    # usage records: a longer one would count as the price's cost).
    api POST /api/admin/models '{"id":"bench-paid","kind":"chat","provider":"stub","upstream_model":"bench-paid"}' >/dev/null
    api PUT /api/admin/prices/stub/bench-paid "$PRICE" >/dev/null
    # chat-budget's key: budgets no run comes near (a request reserves about
    # 0.0025 at 4096 output tokens and costs about 0.0001).
    BUDGET_KEY=
    if [[ " $WORKLOADS " == *" chat-budget "* ]]; then
        made=$(curl -sS -X POST "$GATEHOUSE/api/api-keys" -H "Authorization: Bearer $TOKEN" \
            -H 'Content-Type: application/json' \
            -d '{"name":"bench","limits":{"budget_per_day":"1000000","budget_per_month":"1000000"}}' || true)
        if [ "$(jq -r '.limits.budget_per_day // empty' <<<"$made" 2>/dev/null)" != "" ]; then
            BUDGET_KEY=$(jq -r .key <<<"$made")
        else
            log "this gateway has no budgets (a key made with them shows no budget_per_day: $(head -c 300 <<<"$made")): chat-budget skipped"
            WORKLOADS=$(sed 's/\bchat-budget\b//' <<<"$WORKLOADS")
        fi
    fi
    # An agent with a tool contract of 15 of the 20 tools, tool mode ask; one
    # device signed in with a manifest of the 20 tools (half of them `read`).
    api POST /api/admin/agents "{\"address\":\"bench-agent\",\"name\":\"Bench\",\"model\":\"bench-chat\",
        \"default_tool_mode\":\"ask\",\"tool_contract\":$(jq -nc '[range(15)|"tool_\(.)"]')}" >/dev/null
    ACCESS=$(api POST /api/agent-tokens '{"agent":"bench-agent","device_label":"bench device"}' | jq -r .access_token)
    [ -n "$ACCESS" ] && [ "$ACCESS" != null ] || die "no agent sign-in"
    jq -nc '{app_name:"bench",app_version:"1.0",sdk:"bench",
        tools:[range(20) as $i | {name:"tool_\($i)",description:"Does one thing to a file in the workspace.",
               parameters:{type:"object",properties:{path:{type:"string"}}},class:(if $i % 2 == 0 then "read" else "write" end)}]}' >"$TMP/manifest.json"
    curl -sS --fail-with-body -X PUT "$GATEHOUSE/v1/agents/bench-agent/manifest" -H "Authorization: Bearer $ACCESS" \
        -H 'Content-Type: application/json' --data-binary "@$TMP/manifest.json" >/dev/null
    GATEHOUSE_OK=1
fi

# --- workloads ---------------------------------------------------------------

PROMPT="Summarise the following in one sentence: the quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."
jq -nc --arg p "$PROMPT" '{model:"bench-chat",messages:[{role:"system",content:"You are terse."},{role:"user",content:$p}]}' >"$TMP/chat.json"
jq -nc --arg p "$PROMPT" '{model:"bench-chat",stream:true,messages:[{role:"system",content:"You are terse."},{role:"user",content:$p}]}' >"$TMP/chat-stream.json"
jq -c '.model = "bench-paid"' "$TMP/chat.json" >"$TMP/chat-priced.json"
cp "$TMP/chat-priced.json" "$TMP/chat-budget.json"
jq -nc --arg p "$PROMPT" '{model:"bench-chat-paced",stream:true,messages:[{role:"system",content:"You are terse."},{role:"user",content:$p}]}' >"$TMP/chat-stream-paced.json"
jq -nc '{model:"bench-embed",input:[range(8)|"passage \(.): the quick brown fox jumps over the lazy dog near the river bank"]}' >"$TMP/embeddings.json"
jq -nc '{model:"bench-rerank",query:"which animal jumps?",documents:[range(8)|"passage \(.): the quick brown fox jumps over the lazy dog near the river bank"]}' >"$TMP/rerank.json"
jq -nc --arg p "$PROMPT" '{model:"bench-chat",messages:[{role:"system",content:"You are terse."},{role:"user",content:$p}],
    tools:[range(20)|{type:"function",function:{name:"tool_\(.)",description:"Does one thing to a file in the workspace.",
           parameters:{type:"object",properties:{path:{type:"string"}}}}}]}' >"$TMP/agent-chat.json"
# The Responses API as Codex sends it (instructions as a developer message,
# store false, include): the gateway bridges it to the stub's chat
# completions; direct and nginx get the same body on the stub's own
# /v1/responses (a Responses answer of the same text).
jq -nc --arg p "$PROMPT" '{model:"bench-chat",store:false,include:["reasoning.encrypted_content"],
    input:[{type:"message",role:"developer",content:[{type:"input_text",text:"You are terse."}]},
           {type:"message",role:"user",content:[{type:"input_text",text:$p}]}]}' >"$TMP/responses.json"
jq -c '. + {stream:true}' "$TMP/responses.json" >"$TMP/responses-stream.json"
jq -nc --arg p "$PROMPT" '{model:"bench-chat",max_tokens:256,system:"You are terse.",messages:[{role:"user",content:$p}]}' >"$TMP/messages.json"
jq -nc --arg p "$PROMPT" '{model:"bench-chat",max_tokens:256,stream:true,system:"You are terse.",messages:[{role:"user",content:$p}]}' >"$TMP/messages-stream.json"
jq -c '.model = "bench-claude"' "$TMP/messages.json" >"$TMP/messages-passthrough.json"
jq -c '.model = "bench-claude"' "$TMP/messages-stream.json" >"$TMP/messages-passthrough-stream.json"

base_url() {
    case $1 in
    direct) echo "$STUB" ;;
    nginx) echo "http://127.0.0.1:$NGINX_PORT" ;;
    gatehouse) echo "$GATEHOUSE" ;;
    hyper) echo "$HYPER" ;;
    esac
}
path_of() {
    case $1 in
    chat | chat-priced | chat-budget | chat-stream | chat-stream-paced) echo /v1/chat/completions ;;
    embeddings) echo /v1/embeddings ;;
    rerank) echo /v1/rerank ;;
    responses | responses-stream) echo /v1/responses ;;
    agent-chat) if [ "$2" = gatehouse ]; then echo /v1/agents/bench-agent/chat/completions; else echo /v1/chat/completions; fi ;;
    messages | messages-stream) if [ "$2" = gatehouse ]; then echo /v1/messages; else echo /v1/chat/completions; fi ;;
    messages-passthrough | messages-passthrough-stream) echo /v1/messages ;;
    esac
}
# auth_of WORKLOAD TARGET: the credential the gateway wants for it.
auth_of() {
    [ "$2" = gatehouse ] || return 0
    if [ "$1" = agent-chat ]; then
        echo "Authorization: Bearer $ACCESS"
    elif [ "$1" = chat-budget ]; then
        echo "Authorization: Bearer $BUDGET_KEY"
    else
        echo "Authorization: Bearer $KEY"
    fi
}

AGENT_HEADERS=(-H "X-Service-Conversation-Id: bench-conversation" -H "X-Service-Turn-Id: bench-turn-1")

# Probe every target once per workload: a 200 with the expected body, or skip
# the target (the gateway may not have the model routes yet).
ACTIVE=()
for t in $TARGETS; do
    ok=1
    for w in $WORKLOADS; do
        auth=()
        [ "$t" = gatehouse ] && auth=(-H "$(auth_of "$w" "$t")")
        code=$(curl -s -o "$TMP/probe" -w '%{http_code}' -X POST "$(base_url "$t")$(path_of "$w" "$t")" \
            -H 'Content-Type: application/json' "${auth[@]}" "${AGENT_HEADERS[@]}" --data-binary "@$TMP/$w.json" --max-time 10 || true)
        if [ "$code" != 200 ]; then
            log "skipping $t: $w answered HTTP $code: $(head -c 300 "$TMP/probe")"
            ok=
            break
        fi
    done
    [ -n "$ok" ] && ACTIVE+=("$t")
done
[ ${#ACTIVE[@]} -gt 0 ] || die "no target answered"

# tree_pids PID: the process and all its descendants (nginx's master and
# workers; the gateway is one process, but counted the same way).
tree_pids() {
    local c
    echo "$1"
    for c in $(pgrep -P "$1"); do tree_pids "$c"; done
}
proxy_pids() {
    case $1 in
    nginx) tree_pids "$NGINX_PID" ;;
    gatehouse) tree_pids "$GATEHOUSE_PID" ;;
    hyper) tree_pids "$HYPER_PID" ;;
    esac
}

# children_cpu_s FILE: CPU seconds (user + system) of the finished children in
# FILE, the output of `times` run in the subshell that ran one load generator
# (so that generator's own CPU). `times` must run in that shell itself: a
# command substitution is a fork whose children start from zero.
children_cpu_s() {
    tail -1 "$1" | awk '{ for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%.3f", t }'
}

# run_wrk CONCURRENCY URL BODY_FILE AUTH_HEADER WORKLOAD: a warm-up, then the
# measured run; prints one line of loadgen's JSON.
run_wrk() {
    local lua="$TMP/wrk.lua"
    {
        echo 'wrk.method = "POST"'
        printf 'local f = io.open("%s"); wrk.body = f:read("*a"); f:close()\n' "$3"
        echo 'wrk.headers["Content-Type"] = "application/json"'
        [ -n "$4" ] && printf 'wrk.headers["%s"] = "%s"\n' "${4%%: *}" "${4#*: }"
        if [ "$5" = agent-chat ]; then
            echo 'wrk.headers["X-Service-Conversation-Id"] = "bench-conversation"'
            echo 'wrk.headers["X-Service-Turn-Id"] = "bench-turn-1"'
        fi
        cat <<'LUA'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests":%d,"errors":%d,"rps":%.1f,"p50_ms":%.3f,"p99_ms":%.3f,"ttfb_p50_ms":null,"ttfb_p99_ms":null,"concurrency":%d,"duration_s":%.3f,"loadgen_cpu_s":null}\n',
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    tonumber(os.getenv("WRK_CONNECTIONS")), summary.duration / 1e6))
end
LUA
    } >"$lua"
    if [ "${6:-}" = warmup ]; then
        wrk -t1 -c"$1" -d"${WARMUP}s" -s "$lua" "$2" >/dev/null 2>&1 || true
        return
    fi
    WRK_CONNECTIONS=$1 wrk -t1 -c"$1" -d"${DURATION}s" -s "$lua" "$2" >"$TMP/wrk.out"
    times >"$TMP/times"
    local cpu
    cpu=$(children_cpu_s "$TMP/times")
    tail -1 "$TMP/wrk.out" | jq -c --argjson cpu "$cpu" '.loadgen_cpu_s = $cpu'
}

# run_oha CONCURRENCY URL BODY_FILE AUTH_HEADER WORKLOAD [warmup]: as run_wrk,
# with oha; its JSON turned into loadgen's line. Requests still in flight at
# the deadline are aborted by oha ("aborted due to deadline") and not counted
# as errors; every other error and every non-2xx status is.
run_oha() {
    local args=(--no-tui -c "$1" -m POST -D "$3" -H "Content-Type: application/json")
    [ -n "$4" ] && args+=(-H "$4")
    [ "$5" = agent-chat ] && args+=(-H "X-Service-Conversation-Id: bench-conversation"
        -H "X-Service-Turn-Id: bench-turn-1")
    [ -n "${BENCH_LOADGEN_THREADS:-}" ] && args+=(--worker-threads "$LOADGEN_THREADS")
    if [ "${6:-}" = warmup ]; then
        timeout $((WARMUP + 60)) "$OHA" "${args[@]}" -z "${WARMUP}s" --output-format quiet "$2" >/dev/null 2>&1 || true
        return
    fi
    timeout $((DURATION + 60)) "$OHA" "${args[@]}" -z "${DURATION}s" --output-format json "$2" >"$TMP/oha.json"
    times >"$TMP/times"
    local cpu
    cpu=$(children_cpu_s "$TMP/times")
    jq -c --argjson cpu "$cpu" --argjson c "$1" '
        ([.statusCodeDistribution | to_entries[] | .value] | add // 0) as $responses
        | ([.statusCodeDistribution | to_entries[] | select(.key | startswith("2") | not) | .value] | add // 0) as $bad
        | ([.errorDistribution | to_entries[] | select(.key != "aborted due to deadline") | .value] | add // 0) as $errs
        | {requests: ($responses - $bad), errors: ($bad + $errs), rps: (($responses - $bad) / .summary.total),
           p50_ms: (.latencyPercentiles.p50 * 1000), p99_ms: (.latencyPercentiles.p99 * 1000),
           ttfb_p50_ms: (.firstBytePercentiles.p50 // null | if . == null then null else . * 1000 end),
           ttfb_p99_ms: (.firstBytePercentiles.p99 // null | if . == null then null else . * 1000 end),
           concurrency: $c, duration_s: .summary.total, loadgen_cpu_s: $cpu}' "$TMP/oha.json"
}

mkdir -p "$(dirname "$OUT")"
: >"$OUT"
runs=$(($(wc -w <<<"$WORKLOADS") * $(wc -w <<<"$CONCURRENCY") * ${#ACTIVE[@]} * RUNS))
log "$runs runs of ${WARMUP}s warm-up + ${DURATION}s with $LOADGEN: about $((runs * (WARMUP + DURATION)))s"
# The gateway's resident memory under load: its highest VmRSS while the
# workloads run (sampled four times a second), apart from start-up, set-up
# and the closing login (where password hashes take their 19 MiB work areas).
LOAD_RSS_FILE=$TMP/load-rss
RSS_SAMPLER=
if [ -n "$GATEHOUSE_OK" ]; then
    (
        max=0
        while kill -0 "$GATEHOUSE_PID" 2>/dev/null; do
            rss=0
            while read -r k v _; do
                [ "$k" = VmRSS: ] && rss=$v
            done <"/proc/$GATEHOUSE_PID/status" 2>/dev/null || true
            if [ "$rss" -gt "$max" ]; then
                max=$rss
                echo "$max" >"$LOAD_RSS_FILE"
            fi
            sleep 0.25
        done
    ) &
    RSS_SAMPLER=$!
    PIDS+=($RSS_SAMPLER)
fi
# The order of the measurements: each workload's repeats together (the
# default), or with BENCH_ORDER=interleaved each repeat running every
# workload once, so that workloads compared with one another (dialects with
# chat, chat-priced with chat) are measured at the same stage of the run:
# the same load on the machine, the same size of the gateway's usage
# database (it grows by a record per request, and inserts slow with it).
# Each repeat starts one workload further along the list (a rotation), so
# that no workload always runs first, or always right after the same other
# one: whatever a run leaves behind (the database's pages, a checkpoint
# due) is spread over all of them.
ORDER=$(if [ "${BENCH_ORDER:-}" = interleaved ]; then
    read -ra ws <<<"$WORKLOADS"
    for r in $(seq "$RUNS"); do
        for i in "${!ws[@]}"; do echo "$r:${ws[$(((i + r - 1) % ${#ws[@]}))]}"; done
    done
else
    for w in $WORKLOADS; do for r in $(seq "$RUNS"); do echo "$r:$w"; done; done
fi)
for rw in $ORDER; do
    r=${rw%%:*}
    w=${rw#*:}
    for c in $CONCURRENCY; do
        # Paced streams spend their time waiting for the stub: only their
        # first byte at concurrency 1 is of interest.
        [ "$w" = chat-stream-paced ] && [ "$c" != 1 ] && continue
        # Targets alternated within each repeat, so that each comparison sees
        # similar conditions and a burst of outside load hits every target.
        {
            for t in "${ACTIVE[@]}"; do
                url=$(base_url "$t")$(path_of "$w" "$t")
                auth=$([ "$t" = gatehouse ] && auth_of "$w" "$t" || true)
                # The outside generators warm up in a run of their own first;
                # loadgen warms up inside its run, so the window starts after it.
                settle=0
                case $LOADGEN in
                wrk)
                    run_wrk "$c" "$url" "$TMP/$w.json" "$auth" "$w" warmup
                    run_wrk "$c" "$url" "$TMP/$w.json" "$auth" "$w" >"$TMP/loadgen.out" 2>"$TMP/loadgen.err" &
                    ;;
                oha)
                    run_oha "$c" "$url" "$TMP/$w.json" "$auth" "$w" warmup
                    run_oha "$c" "$url" "$TMP/$w.json" "$auth" "$w" >"$TMP/loadgen.out" 2>"$TMP/loadgen.err" &
                    ;;
                loadgen)
                    args=(--url "$url" --method POST --body-file "$TMP/$w.json"
                        --concurrency "$c" --duration "$DURATION" --warmup "$WARMUP" --threads "$LOADGEN_THREADS")
                    [ -n "${BENCH_RATE:-}" ] && args+=(--rate "$BENCH_RATE")
                    [ -n "$auth" ] && args+=(--header "$auth")
                    [ "$w" = agent-chat ] && args+=(--header "X-Service-Conversation-Id: bench-conversation"
                        --header "X-Service-Turn-Id: bench-turn-1")
                    [ "$w" = chat-stream ] || [ "$w" = chat-stream-paced ] && args+=(--stream --expect-suffix '[DONE]')
                    [ "$w" = responses-stream ] && args+=(--stream)
                    # Anthropic's stream has no [DONE]: read to its end.
                    [ "$w" = messages-stream ] || [ "$w" = messages-passthrough-stream ] && args+=(--stream)
                    timeout $((WARMUP + DURATION + 60)) "$BIN/loadgen" "${args[@]}" >"$TMP/loadgen.out" 2>"$TMP/loadgen.err" &
                    settle=$WARMUP
                    ;;
                esac
                lg=$!
                # CPU used by the stub and by the proxy's process tree during
                # the measured window.
                sleep "$settle"
                stub0=$(cpu_ticks "$STUB_PID")
                proxy0=$(cpu_ticks $(proxy_pids "$t"))
                sys0=$(stat_field 13 $(proxy_pids "$t"))
                flt0=$(stat_field 8 $(proxy_pids "$t"))
                db0=$(db_ticks $(proxy_pids "$t"))
                wait "$lg" || die "$LOADGEN failed for $t $w c=$c: $(cat "$TMP/loadgen.err")"
                stub1=$(cpu_ticks "$STUB_PID")
                proxy1=$(cpu_ticks $(proxy_pids "$t"))
                sys1=$(stat_field 13 $(proxy_pids "$t"))
                flt1=$(stat_field 8 $(proxy_pids "$t"))
                db1=$(db_ticks $(proxy_pids "$t"))
                [ -s "$TMP/loadgen.err" ] && log "$t $w c=$c: $(cat "$TMP/loadgen.err")"
                # Paced but short of the rate: the load was not the one asked for.
                if [ -n "${BENCH_RATE:-}" ] && jq -e --argjson r "$BENCH_RATE" '.rps < 0.97 * $r' "$TMP/loadgen.out" >/dev/null; then
                    log "$t $w c=$c: $(jq -r .rps "$TMP/loadgen.out") requests/s, short of BENCH_RATE=$BENCH_RATE: this run's CPU per request is not at the asked load"
                fi
                jq -c --arg t "$t" --arg w "$w" --arg load "$(cut -d' ' -f1 /proc/loadavg)" \
                    --arg gen "$LOADGEN" --argjson run "$r" --argjson access_log "$([ -n "$ACCESS_LOG" ] && echo true || echo false)" \
                    --argjson stub $(((stub1 - stub0) * 100 / HZ)) --argjson proxy $(((proxy1 - proxy0) * 100 / HZ)) \
                    --argjson sys $(((sys1 - sys0) * 100 / HZ)) --argjson faults $((flt1 - flt0)) \
                    --argjson db $(((db1 - db0) * 100 / HZ)) \
                    '{target:$t,workload:$w,run:$run,loadgen:$gen} + . + {stub_cpu_s:($stub/100),
                      proxy_cpu_s:(if $t == "direct" then null else $proxy/100 end),
                      proxy_sys_s:(if $t == "direct" then null else $sys/100 end),
                      proxy_db_s:(if $t == "gatehouse" then $db/100 else null end),
                      proxy_minor_faults:(if $t == "direct" then null else $faults end),access_log:$access_log,
                      load1:($load|tonumber)}' "$TMP/loadgen.out" | tee -a "$OUT" >&2
            done
        }
    done
done
# The workloads are over: the closing login below is not load.
[ -n "$RSS_SAMPLER" ] && kill "$RSS_SAMPLER" 2>/dev/null || true

# --- report ------------------------------------------------------------------

echo
echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); nginx worker_processes $NGINX_WORKERS; load generator $LOADGEN ($([ "$LOADGEN" = oha ] && [ -z "${BENCH_LOADGEN_THREADS:-}" ] && echo "oha's default threads" || echo "$LOADGEN_THREADS thread(s)")); access logs $([ -n "$ACCESS_LOG" ] && echo "on, to files, on both proxies" || echo "off on both proxies"); ${WARMUP}s warm-up + ${DURATION}s per run, $RUNS run(s) each, targets alternated"
echo
# Shared by the tables: a figure over the repeats is "median (min–max)", or
# the one value when there was one run; ratios are taken run by run (the
# targets of one repeat ran side by side) before their spread.
JQ_LIB='
def f: if . == null then "–" else (. * 1000 | round / 1000 | tostring) end;
def r: if . == null then "–" else (. | round | tostring) end;
def x: if . == null then "–" else (. * 100 | round / 100 | tostring) + "×" end;
def pc: if . == null then "–" else (. * 100 | round | tostring) + " %" end;
def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def spread(fmt): map(select(. != null)) | if length == 0 then "–" elif length == 1 then (.[0] | fmt)
    else "\(med | fmt) (\(min | fmt)–\(max | fmt))" end;
def us_per_req: if .proxy_cpu_s == null or .requests == 0 then null else .proxy_cpu_s * 1e6 / .requests end;
def cores(cpu): if cpu == null then null else cpu / .duration_s end;
def ratio(a; b): if a == null or b == null or b == 0 then null else a / b end;
def diff(a; b): if a == null or b == null then null else a - b end;
# Groups in the order of first appearance.
def groups(k): . as $all | reduce .[] as $x ([]; if any(.[]; . == ($x | k)) then . else . + [$x | k] end)
    | map(. as $key | [$all[] | select(k == $key)]);
# One workload and concurrency: {run: {target: line}}.
def by_run: reduce .[] as $x ({}; .[$x.run // 1 | tostring][$x.target] = $x) | [.[]];
'
jq -rs "$JQ_LIB"'
"| workload | concurrency | target | runs | req/s | p50 ms | p99 ms | TTFB p50 ms | TTFB p99 ms | errors | proxy CPU µs/req | cores used: loadgen / stub / proxy |",
"|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
(groups([.workload, .concurrency, .target])[] | .[0] as $a
 | "| \($a.workload) | \($a.concurrency) | \($a.target) | \(length) | \(map(.rps) | spread(r)) | \(map(.p50_ms) | spread(f)) | \(map(.p99_ms) | spread(f)) | \(map(.ttfb_p50_ms) | spread(f)) | \(map(.ttfb_p99_ms) | spread(f)) | \(map(.errors) | add) | \(map(us_per_req) | spread(r)) | \(map(cores(.loadgen_cpu_s)) | spread(f)) / \(map(cores(.stub_cpu_s)) | spread(f)) / \(map(cores(.proxy_cpu_s)) | spread(f)) |")
' "$OUT"
echo
echo "CPU per request beside nginx (proxy process tree, µs/request; ratios and req/s run by run):"
echo
jq -rs "$JQ_LIB"'
"| workload | concurrency | nginx µs/req | hyper floor µs/req | gatehouse µs/req | gatehouse / nginx CPU | gatehouse req/s vs nginx |",
"|---|---:|---:|---:|---:|---:|---:|",
(groups([.workload, .concurrency])[] | .[0] as $a | by_run as $runs
 | "| \($a.workload) | \($a.concurrency) | \($runs | map(.nginx // null | if . then us_per_req else null end) | spread(r)) | \($runs | map(.hyper // null | if . then us_per_req else null end) | spread(r)) | \($runs | map(.gatehouse // null | if . then us_per_req else null end) | spread(r)) | \($runs | map(ratio(.gatehouse // null | if . then us_per_req else null end; .nginx // null | if . then us_per_req else null end)) | spread(x)) | \($runs | map(ratio(.gatehouse.rps; .nginx.rps)) | spread(pc)) |")
' "$OUT"
echo
echo "Added latency over direct (ms, run by run; for the streams on TTFB and on the full stream):"
echo
jq -rs "$JQ_LIB"'
"| workload | concurrency | measure | nginx +p50 | nginx +p99 | hyper floor +p50 | gatehouse +p50 | gatehouse +p99 |",
"|---|---:|---|---:|---:|---:|---:|---:|",
(groups([.workload, .concurrency])[] | .[0] as $a | by_run as $runs
 | (if $a.workload == "chat-stream-paced" then [["TTFB", "ttfb_p50_ms", "ttfb_p99_ms"]]
    elif $a.workload == "chat-stream" then [["TTFB", "ttfb_p50_ms", "ttfb_p99_ms"], ["full", "p50_ms", "p99_ms"]]
    else [["full", "p50_ms", "p99_ms"]] end)[] as [$m, $p50, $p99]
 | "| \($a.workload) | \($a.concurrency) | \($m) | \($runs | map(diff(.nginx[$p50]; .direct[$p50])) | spread(f)) | \($runs | map(diff(.nginx[$p99]; .direct[$p99])) | spread(f)) | \($runs | map(diff(.hyper[$p50]; .direct[$p50])) | spread(f)) | \($runs | map(diff(.gatehouse[$p50]; .direct[$p50])) | spread(f)) | \($runs | map(diff(.gatehouse[$p99]; .direct[$p99])) | spread(f)) |")
' "$OUT"
echo
if [ -n "$GATEHOUSE_OK" ] && [[ " ${ACTIVE[*]} " == *" gatehouse "* ]]; then
    # Usage accounting really happened: one record per request, none dropped.
    TOKEN=$(login)
    sleep 1 # the usage writer batches
    written=$(curl -sS "$GATEHOUSE/metrics" -H "Authorization: Bearer $TOKEN" |
        awk '/^gatehouse_usage_records_(written|dropped|failed)_total/ {sub("gatehouse_usage_records_", "", $1); sub("_total", "", $1); printf "%s %s, ", $1, $2}')
    echo "Gateway usage records: ${written%, } (requests sent to the gateway, warm-up included: one record each)."
    echo
    # Resident memory: the peak over the whole run (VmHWM) and now.
    [ -n "${BENCH_SMAPS:-}" ] && cp "/proc/$GATEHOUSE_PID/smaps" "$BENCH_SMAPS"
    echo "Gateway resident memory under load (highest while the workloads ran): $(awk '{print $1 / 1024}' "$LOAD_RSS_FILE" 2>/dev/null || echo "?") MiB."
    echo "Gateway resident memory: peak $(awk '/^VmHWM/ {print $2 / 1024}' "/proc/$GATEHOUSE_PID/status") MiB, now $(awk '/^VmRSS/ {print $2 / 1024}' "/proc/$GATEHOUSE_PID/status") MiB ($(awk '/^RssAnon/ {print $2 / 1024}' "/proc/$GATEHOUSE_PID/status") MiB anonymous, $(awk '/^RssFile/ {print $2 / 1024}' "/proc/$GATEHOUSE_PID/status") MiB of mapped files such as its own code)."
    echo
fi
log "raw results in $OUT"
