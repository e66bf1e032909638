#!/usr/bin/env bash
# Runs every test: the Rust suite on SQLite, the same suite on PostgreSQL
# (a private cluster started and stopped here), and the client tests with the
# official openai Python SDK, and the web console's tests in a headless
# Chromium (Playwright from PyPI). Needs: cargo, python3, chromium, node and npm (the AG-UI
# events are checked with the protocol's own packages, tests/agui),
# PostgreSQL server binaries (apt-get install postgresql); .ci/run installs them.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== npm ci (tests/agui: @ag-ui/core, @ag-ui/client)"
(cd tests/agui && npm ci --silent --no-audit --no-fund)
echo "== npm ci (tests/oidc: oidc-provider, the OpenID Connect provider of the SSO tests)"
(cd tests/oidc && npm ci --silent --no-audit --no-fund)

echo "== cargo test (SQLite)"
cargo test --workspace --no-fail-fast 2>&1 | tee /tmp/gatehouse-test-sqlite.log

echo "== cargo test (PostgreSQL)"
URL=$(scripts/pg.sh start)
trap 'scripts/pg.sh stop' EXIT
GATEHOUSE_TEST_DATABASE_URL="$URL" GATEHOUSE_TEST_PG_FAULT=1 cargo test -p gatehouse --no-fail-fast 2>&1 | tee /tmp/gatehouse-test-pg.log

if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
# Both binaries: `--bin gatehouse` alone would skip stub-upstream.
cargo build -q -p gatehouse -p gatehouse-stub-upstream --bins

if [ -d tests/python ]; then
  echo "== client tests (openai Python SDK)"
  .venv/bin/pip install -q -r tests/python/requirements.txt
  .venv/bin/python -m pytest -q tests/python
fi

if [ -d tests/console ]; then
  # Playwright drives Debian's Chromium (/usr/bin/chromium, or $CHROMIUM);
  # it never downloads a browser of its own.
  echo "== console tests (headless Chromium through Playwright)"
  .venv/bin/pip install -q -r tests/console/requirements.txt
  .venv/bin/python -m pytest -q tests/console
fi
