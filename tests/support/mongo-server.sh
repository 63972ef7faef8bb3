#!/usr/bin/env bash
# Provide a MongoDB wire-protocol server for the test suite.
#
#   tests/support/mongo-server.sh start STATE_DIR   # writes STATE_DIR/uri
#   tests/support/mongo-server.sh stop STATE_DIR
#   tests/support/mongo-server.sh kill STATE_DIR     # SIGKILL (fault tests)
#   tests/support/mongo-server.sh restart STATE_DIR  # same port, same data
#
# Which server, in this order:
#   1. $MONGODB_URI when set (nothing is started or stopped);
#   2. mongod from PATH, on a free port with a temporary dbpath;
#   3. FerretDB v1.24.2 (built by install-ferretdb.sh) on the local
#      PostgreSQL (127.0.0.1:5432, user root; a fresh database is created
#      and dropped at stop) when it answers, else with its SQLite handler in
#      STATE_DIR.  IPD_FERRETDB_HANDLER=postgresql|sqlite forces one.
# If none can be provided, it exits non-zero saying why: the MongoDB suites
# then fail; they are never skipped.
set -euo pipefail

cmd=${1:?usage: mongo-server.sh start|stop|kill|restart STATE_DIR}
state=${2:?usage: mongo-server.sh start|stop|kill|restart STATE_DIR}
here=$(cd "$(dirname "$0")" && pwd)

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Wait until the port accepts connections (bounded: there is no readiness
# event to wait on for an external server).
wait_port() {
  local port=$1 pid=$2 deadline=$((SECONDS + 60))
  while ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "mongo-server: server exited during start-up; log:" >&2
      tail -n 30 "$state/server.log" >&2 || true
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "mongo-server: port $port not open after 60 s" >&2
      return 1
    fi
    sleep 0.1
  done
}

launch() {
  local port=$1 kind
  kind=$(cat "$state/kind")
  case "$kind" in
    mongod)
      mkdir -p "$state/db"
      mongod --bind_ip 127.0.0.1 --port "$port" --dbpath "$state/db" \
        >>"$state/server.log" 2>&1 &
      ;;
    ferretdb-sqlite)
      mkdir -p "$state/sqlite"
      "$(cat "$state/bin")" --listen-addr "127.0.0.1:$port" --handler sqlite \
        --sqlite-url "file:$state/sqlite/" --state-dir "$state" \
        --telemetry disable --debug-addr=- --log-level warn >>"$state/server.log" 2>&1 &
      ;;
    ferretdb-postgresql)
      "$(cat "$state/bin")" --listen-addr "127.0.0.1:$port" --handler postgresql \
        --postgresql-url "$(cat "$state/pgurl")" --state-dir "$state" \
        --telemetry disable --debug-addr=- --log-level warn >>"$state/server.log" 2>&1 &
      ;;
  esac
  echo $! > "$state/pid"
  wait_port "$port" "$!"
}

start() {
  mkdir -p "$state"
  if [ -n "${MONGODB_URI:-}" ]; then
    echo external > "$state/kind"
    echo "$MONGODB_URI" > "$state/uri"
    echo "mongo-server: using MONGODB_URI" >&2
    return 0
  fi
  local port
  port=$(free_port)
  echo "$port" > "$state/port"
  if command -v mongod >/dev/null 2>&1; then
    echo mongod > "$state/kind"
  else
    local bin
    if ! bin=$("$here/install-ferretdb.sh"); then
      echo "mongo-server: no MONGODB_URI, no mongod on PATH, and FerretDB could not be built" >&2
      return 1
    fi
    echo "$bin" > "$state/bin"
    # PostgreSQL when it is there (FerretDB pushes far more of each query
    # down to it: single-document operations are ~50x faster than on its
    # SQLite handler), else SQLite in the state dir.
    local handler=${IPD_FERRETDB_HANDLER:-auto} db="interpd_test_$$_$RANDOM"
    if [ "$handler" = auto ]; then
      handler=sqlite
      if command -v createdb >/dev/null 2>&1 &&
         createdb -h 127.0.0.1 -U root "$db" 2>/dev/null; then
        handler=postgresql
        echo "$db" > "$state/pgdb"
      fi
    elif [ "$handler" = postgresql ]; then
      createdb -h 127.0.0.1 -U root "$db"
      echo "$db" > "$state/pgdb"
    fi
    if [ "$handler" = postgresql ]; then
      echo "postgres://root@127.0.0.1:5432/$db" > "$state/pgurl"
      echo ferretdb-postgresql > "$state/kind"
    else
      echo ferretdb-sqlite > "$state/kind"
    fi
  fi
  launch "$port"
  echo "mongodb://127.0.0.1:$port/" > "$state/uri"
  echo "mongo-server: $(cat "$state/kind") on 127.0.0.1:$port (pid $(cat "$state/pid"))" >&2
}

stop_pid() {
  local sig=$1
  [ -f "$state/pid" ] || return 0
  local pid
  pid=$(cat "$state/pid")
  kill "-$sig" "$pid" 2>/dev/null || true
  # Reap: wait for the process to go, bounded.
  local deadline=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$state/pid"
}

case "$cmd" in
  start) start ;;
  stop)
    [ -f "$state/kind" ] || exit 0
    [ "$(cat "$state/kind")" = external ] && exit 0
    stop_pid TERM
    if [ -f "$state/pgdb" ]; then dropdb -h 127.0.0.1 -U root --if-exists "$(cat "$state/pgdb")" || true; fi
    ;;
  kill) stop_pid KILL ;;
  restart) launch "$(cat "$state/port")" ;;
  *) echo "mongo-server: unknown command $cmd" >&2; exit 2 ;;
esac
