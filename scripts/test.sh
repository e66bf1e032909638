#!/usr/bin/env bash
# Runs every test: the Rust suite on SQLite, the same suite on PostgreSQL
# (a private cluster started and stopped here), and the client tests with the
# official openai Python SDK, and the web console's tests in a headless Chromium
# (Playwright from PyPI). Needs: cargo, python3 with venv, chromium, node and npm
# (the AG-UI events are checked with the protocol's own packages, tests/agui, and
# the AG-UI endpoint is driven by @ag-ui/client's HttpAgent from the Rust tests; the
# single sign-on tests run a real OpenID Connect provider, tests/oidc),
# PostgreSQL server binaries (apt-get install postgresql); .ci/run installs them.
#
# Everything it makes lives in a new temporary directory and on free ports, so
# two runs can share a machine. Without PostgreSQL binaries the PostgreSQL run
# is skipped, and said so; GATEHOUSE_TEST_REQUIRE_PG=1 (CI) makes that a failure.
set -uo pipefail
cd "$(dirname "$0")/.."

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-test.XXXXXX")
PG_DIR=
failed=()
skipped=()
cleanup() {
  if [ -n "$PG_DIR" ]; then GATEHOUSE_PG_DIR=$PG_DIR scripts/pg.sh stop || true; fi
  if [ ${#failed[@]} -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT

# run NAME LOG CMD...: runs CMD, its output also into $TMP/LOG, and records a failure.
run() {
  local name=$1 log=$2
  shift 2
  echo "== $name"
  if ! "$@" 2>&1 | tee "$TMP/$log"; then
    failed+=("$name (log: $TMP/$log)")
  fi
}

run "npm ci (tests/agui: @ag-ui/core, @ag-ui/client)" npm.log \
  bash -c 'cd tests/agui && npm ci --silent --no-audit --no-fund'

run "npm ci (tests/oidc: oidc-provider, the OpenID Connect provider of the SSO tests)" npm-oidc.log \
  bash -c 'cd tests/oidc && npm ci --silent --no-audit --no-fund'

# The real agent CLIs of the client tests (tests/python/test_claude_code.py,
# test_codex_cli.py): Claude Code and Codex, pinned; each package brings its
# native binary for this platform.
run "npm ci (tests/agent-clis: @anthropic-ai/claude-code, @openai/codex)" npm-agent-clis.log \
  bash -c 'cd tests/agent-clis && npm ci --silent --no-audit --no-fund'

# The TypeScript MCP SDK's client (tests/mcp-ts), driven by tests/python/test_mcp_sdk.py.
run "npm ci (tests/mcp-ts: @modelcontextprotocol/sdk)" npm-mcp-ts.log \
  bash -c 'cd tests/mcp-ts && npm ci --silent --no-audit --no-fund'

# The Python venv comes first: the MCP gateway's Rust tests (tests/api/mcp) start
# real MCP servers written with the `mcp` Python SDK (tests/mcp/servers.py) with it.
venv_ok=
if [ -d tests/python ]; then
  if [ ! -x .venv/bin/python ] && ! python3 -m venv .venv; then
    failed+=("python3 -m venv .venv (apt-get install python3-venv)")
  else
    run "pip install" pip.log .venv/bin/pip install -q -r tests/python/requirements.txt
    venv_ok=1
  fi
fi

run "cargo test (SQLite)" sqlite.log cargo test --workspace --no-fail-fast

if why=$(scripts/pg.sh available); then
  PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-pg.XXXXXX")
  echo "== PostgreSQL cluster in $PG_DIR"
  if URL=$(GATEHOUSE_PG_DIR=$PG_DIR scripts/pg.sh start); then
    # The fault tests (tests/processes/db_outage.rs, and the budgets' "database down" test in
    # tests/processes/budgets.rs) each start and stop a cluster of their own
    # (tests/common/pg_cluster.rs), also in a temporary directory on a free port.
    run "cargo test (PostgreSQL at $URL)" pg.log \
      env GATEHOUSE_TEST_DATABASE_URL="$URL" GATEHOUSE_TEST_PG_FAULT=1 \
      cargo test -p gatehouse --no-fail-fast
  else
    failed+=("PostgreSQL cluster did not start")
  fi
else
  echo "== cargo test (PostgreSQL): SKIPPED: $why"
  if [ "${GATEHOUSE_TEST_REQUIRE_PG:-}" = 1 ]; then
    failed+=("PostgreSQL tests skipped but GATEHOUSE_TEST_REQUIRE_PG=1: $why")
  else
    skipped+=("PostgreSQL tests: $why")
  fi
fi

if [ -n "$venv_ok" ]; then
  echo "== client tests (openai Python SDK)"
  if true; then
    # Both binaries: `--bin gatehouse` alone would skip stub-upstream.
    run "cargo build (binaries for the client tests)" build.log \
      cargo build -q -p gatehouse -p gatehouse-stub-upstream --bins
    run "pytest tests/python" pytest.log .venv/bin/python -m pytest -q tests/python
    if [ -d tests/console ]; then
      # Playwright drives Debian's Chromium (/usr/bin/chromium, or $CHROMIUM);
      # it never downloads a browser of its own.
      run "pip install (console tests)" pip-console.log \
        .venv/bin/pip install -q -r tests/console/requirements.txt
      run "pytest tests/console (headless Chromium)" console.log \
        .venv/bin/python -m pytest -q tests/console
    fi
  fi
fi

# The criterion benches of the hot path's pure parts, once, so they keep
# building and running. The dev profile reuses the test build (a release build
# of every dependency would cost CI minutes): these figures are not for
# comparison; `cargo bench --bench hot_path` gives real ones.
run "cargo bench --bench hot_path (smoke run, dev profile)" bench.log \
  cargo bench -q --profile dev --bench hot_path -- --warm-up-time 0.1 --measurement-time 0.2

echo "== summary"
for s in "${skipped[@]}"; do echo "SKIPPED: $s"; done
for f in "${failed[@]}"; do echo "FAILED: $f"; done
if [ ${#failed[@]} -gt 0 ]; then exit 1; fi
if [ ${#skipped[@]} -gt 0 ]; then
  echo "every test step that ran passed; ${#skipped[@]} skipped (above)"
else
  echo "all test steps passed"
fi
