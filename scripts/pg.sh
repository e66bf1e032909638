#!/usr/bin/env bash
# A private PostgreSQL cluster for tests. It runs as an ordinary user
# (postgres refuses root), in a directory and on a port of its own, so
# several runs can share a machine.
#
#   GATEHOUSE_PG_DIR=DIR scripts/pg.sh start   # prints the URL to use
#   GATEHOUSE_PG_DIR=DIR scripts/pg.sh pause   # stop, keep the data (fault tests)
#   GATEHOUSE_PG_DIR=DIR scripts/pg.sh stop    # stop and remove DIR
#
# Without GATEHOUSE_PG_DIR, `start` makes a new temporary directory and says on
# standard error which one (pass it to `stop`). The port is GATEHOUSE_PG_PORT,
# else a free one chosen at the first start and kept in DIR/port, so a paused
# cluster comes back at the same URL.
# `scripts/pg.sh available` exits 0 when PostgreSQL server binaries are
# installed, else prints why not and exits 1.
set -euo pipefail
# Server binaries: GATEHOUSE_PG_BIN, else Debian's newest, else initdb on PATH.
BIN=${GATEHOUSE_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)}
[ -n "$BIN" ] || BIN=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/x)")

have_binaries() {
  [ -x "$BIN/initdb" ] && [ -x "$BIN/pg_ctl" ]
}
need_binaries() {
  have_binaries || {
    echo "pg.sh: PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql" >&2
    exit 1
  }
}
as_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
free_port() {
  # Ask the kernel for a free port; bash's /dev/tcp probe is the fallback.
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
  else
    local p
    while :; do
      p=$((20000 + RANDOM % 40000))
      (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
  fi
}
need_dir() {
  [ -n "${GATEHOUSE_PG_DIR:-}" ] || {
    echo "pg.sh: set GATEHOUSE_PG_DIR to the directory that 'start' used" >&2
    exit 2
  }
}

case "${1:-}" in
  available)
    if have_binaries; then exit 0; fi
    echo "no PostgreSQL server binaries (initdb, pg_ctl) in GATEHOUSE_PG_BIN, /usr/lib/postgresql/*/bin or on PATH; apt-get install postgresql (.ci/run does)"
    exit 1
    ;;
  start)
    need_binaries
    DIR=${GATEHOUSE_PG_DIR:-}
    if [ -z "$DIR" ]; then
      DIR=$(mktemp -d "${TMPDIR:-/tmp}/gatehouse-pg.XXXXXX")
      echo "pg.sh: cluster in $DIR (stop it with GATEHOUSE_PG_DIR=$DIR $0 stop)" >&2
    fi
    mkdir -p "$DIR"
    if [ "$(id -u)" = 0 ]; then chown postgres "$DIR"; fi
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
      as_user "$BIN/initdb" -D "$DIR/data" -U gatehouse --auth=trust >/dev/null
    fi
    # A port pinned by the caller or by an earlier start is kept; a chosen one
    # may be taken by someone else before postgres binds it, so try again.
    pinned=${GATEHOUSE_PG_PORT:-}
    [ -n "$pinned" ] || pinned=$(cat "$DIR/port" 2>/dev/null || true)
    for attempt in 1 2 3 4 5; do
      PORT=${pinned:-$(free_port)}
      if as_user "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w \
        -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=on" start >/dev/null; then
        echo "$PORT" >"$DIR/port"
        echo "postgres://gatehouse@127.0.0.1:$PORT/postgres"
        exit 0
      fi
      [ -z "$pinned" ] || break
    done
    echo "pg.sh: PostgreSQL did not start (log: $DIR/log):" >&2
    tail -n 5 "$DIR/log" >&2 || true
    exit 1
    ;;
  stop)
    need_dir
    if have_binaries && [ -d "$GATEHOUSE_PG_DIR/data" ]; then
      as_user "$BIN/pg_ctl" -D "$GATEHOUSE_PG_DIR/data" -m fast stop >/dev/null 2>&1 || true
    fi
    # Remove only what this script made: never a directory named by mistake.
    for f in "$GATEHOUSE_PG_DIR"/* "$GATEHOUSE_PG_DIR"/.[!.]*; do
      [ -e "$f" ] || continue
      case "${f##*/}" in
        data|log|port|.s.PGSQL.*) ;;
        *) echo "pg.sh: $GATEHOUSE_PG_DIR holds ${f##*/}, not only a cluster of ours: not removing it" >&2; exit 1 ;;
      esac
    done
    rm -rf "$GATEHOUSE_PG_DIR"
    ;;
  pause)
    need_dir
    need_binaries
    as_user "$BIN/pg_ctl" -D "$GATEHOUSE_PG_DIR/data" -m fast stop >/dev/null
    ;;
  *) echo "usage: GATEHOUSE_PG_DIR=DIR $0 start|stop|pause, or $0 available" >&2; exit 2 ;;
esac
