#!/usr/bin/env bash
# A private PostgreSQL cluster for tests: `scripts/pg.sh start` prints the
# URL to use; `scripts/pg.sh stop` stops and removes it. It runs as an
# ordinary user (postgres refuses root), on a port and socket of its own.
set -euo pipefail
DIR=${GATEHOUSE_PG_DIR:-/tmp/gatehouse-pg}
PORT=${GATEHOUSE_PG_PORT:-54329}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
[ -n "$BIN" ] || { echo "PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }
as_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "${1:-}" in
  start)
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
      mkdir -p "$DIR"
      [ "$(id -u)" = 0 ] && chown postgres "$DIR"
      as_user "$BIN/initdb" -D "$DIR/data" -U gatehouse --auth=trust >/dev/null
    fi
    as_user "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w \
      -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=on" start >/dev/null
    echo "postgres://gatehouse@127.0.0.1:$PORT/postgres"
    ;;
  stop)
    as_user "$BIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$DIR"
    ;;
  pause)   # stop without removing the data (fault tests)
    as_user "$BIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null
    ;;
  *) echo "usage: $0 start|stop|pause" >&2; exit 2 ;;
esac
