#!/usr/bin/env bash
# Follows docs/sso.md's agent-app steps (1 to 7) with curl and openssl, against a real
# `gatehouse serve` and the test OpenID Connect provider (tests/oidc), the browser being
# curl with a cookie jar. Needs node, curl, openssl, python3; run from the repository root.
set -euo pipefail
ROOT=$(pwd)
cargo build -q --bin gatehouse
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/gatehouse
W=$(mktemp -d)
(cd tests/oidc && [ -d node_modules ] || npm ci --silent --no-audit --no-fund)
cd tests/oidc
coproc IDP { node server.mjs --port 0; }
read -r line <&"${IDP[0]}"
ISSUER=$(echo "$line" | python3 -c 'import json,sys;print(json.load(sys.stdin)["issuer"])')
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
GW=http://127.0.0.1:$PORT
GATEHOUSE_LISTEN=127.0.0.1:$PORT GATEHOUSE_DATABASE_URL=sqlite://$W/gh.db GATEHOUSE_ADMIN_EMAIL=admin@example.com GATEHOUSE_ADMIN_PASSWORD=admin-password-1 GATEHOUSE_LOG=warn "$BIN" serve > $W/gw.log 2>&1 &
GWPID=$!
trap 'kill $GWPID ${IDP_PID}; rm -rf "$W"' EXIT
for i in $(seq 50); do curl -sf $GW/healthz >/dev/null && break; sleep 0.2; done
curl -sf -XPOST $ISSUER/_test/clients -H 'content-type: application/json' -d "{\"client_id\":\"gatehouse\",\"client_secret\":\"s3cret-s3cret\",\"redirect_uris\":[\"$GW/api/auth/sso/corp/callback\"]}" >/dev/null
curl -sf -XPOST $ISSUER/_test/next-user -H 'content-type: application/json' -d '{"sub":"ann","email":"ann@example.com","email_verified":true}' >/dev/null
ADMIN=$(curl -sf $GW/api/auth/jwt/login -d username=admin@example.com -d password=admin-password-1 | python3 -c 'import json,sys;print(json.load(sys.stdin)["access_token"])')
curl -sS -X POST "$GW/api/admin/sso" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' -d "{\"name\":\"corp\",\"display_name\":\"Corp account\",\"issuer\":\"$ISSUER\",\"client_id\":\"gatehouse\",\"client_secret\":\"s3cret-s3cret\",\"allowed_domains\":[\"example.com\"]}"; echo
curl -sS -XPOST $GW/api/admin/providers -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' -d '{"name":"up","type":"openai","base_url":"http://127.0.0.1:9/v1"}' >/dev/null
curl -sS -XPOST $GW/api/admin/models -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' -d '{"id":"chat-1","kind":"chat","provider":"up","upstream_model":"x"}' >/dev/null
curl -sS -XPOST $GW/api/admin/agents -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' -d '{"address":"desk@corp","name":"Desk","model":"chat-1"}' >/dev/null
# Step 1
curl -sS $GW/api/auth/sso; echo
# Step 2 (as documented)
VERIFIER=$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
CHALLENGE=$(printf %s "$VERIFIER" | openssl dgst -sha256 -binary | base64 | tr '+/' '-_' | tr -d '=')
STATE=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
echo "verifier ${#VERIFIER} challenge ${#CHALLENGE}"
# Step 4-5: the browser (curl with a cookie jar, one redirect at a time)
URL="$GW/api/auth/sso/corp/authorize?redirect_uri=http%3A%2F%2F127.0.0.1%3A53682%2Fcallback&state=$STATE&code_challenge=$CHALLENGE&code_challenge_method=S256"
for i in $(seq 10); do
  case "$URL" in http://127.0.0.1:53682/*) break;; esac
  NEXT=$(curl -sS -b $W/jar -c $W/jar -o /dev/null -w '%{redirect_url}' "$URL")
  [ -n "$NEXT" ] || { echo "no redirect from $URL"; exit 1; }
  URL=$NEXT
done
echo "app got: $URL"
CODE=$(python3 -c 'import sys,urllib.parse as u;print(u.parse_qs(u.urlparse(sys.argv[1]).query)["code"][0])' "$URL")
GOT_STATE=$(python3 -c 'import sys,urllib.parse as u;print(u.parse_qs(u.urlparse(sys.argv[1]).query)["state"][0])' "$URL")
[ "$GOT_STATE" = "$STATE" ] || { echo "the state came back changed"; exit 1; }
echo "state matches"
# Step 6 (as documented)
RESP=$(curl -sS -X POST "$GW/api/auth/sso/token" -H 'Content-Type: application/json' \
  -d "{\"code\":\"$CODE\",\"code_verifier\":\"$VERIFIER\",\"redirect_uri\":\"http://127.0.0.1:53682/callback\"}")
echo "$RESP"
LOGIN_TOKEN=$(echo "$RESP" | python3 -c 'import json,sys;print(json.load(sys.stdin)["access_token"])')
# Step 7 (as documented)
curl -sS -X POST "$GW/api/agent-tokens" -H "Authorization: Bearer $LOGIN_TOKEN" \
  -H 'Content-Type: application/json' -d '{"agent":"desk@corp","device_label":"Ann'\''s laptop"}' | python3 -c 'import json,sys;v=json.load(sys.stdin);print("agent sign-in:", v["agent"], v["device_id"], v["refresh_token"][:4])'
echo "walk-through OK"
