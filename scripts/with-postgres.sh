#!/usr/bin/env bash
# Runs a command against Postgres: DATABASE_URL when it is set, otherwise a throw-away Postgres 15
# started here (in a temporary directory, on a free loopback port) and stopped afterwards. As root
# it installs Debian's postgresql when the binaries are missing; otherwise, with FLOW_PG_OPTIONAL
# set (npm test), it runs the command on the embedded store alone and says so.
# Exports FLOW_TEST_PGDATA / FLOW_TEST_PGBIN / FLOW_TEST_PG_SU for suites that restart the server.
set -euo pipefail
if [ -n "${DATABASE_URL:-}" ]; then exec "$@"; fi

PGBIN=${FLOW_PGBIN:-/usr/lib/postgresql/15/bin}
if [ ! -x "$PGBIN/postgres" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null
  elif [ -n "${FLOW_PG_OPTIONAL:-}" ]; then
    echo "Postgres 15 server binaries not found in $PGBIN: running on the embedded store only (install Debian's postgresql package or set DATABASE_URL for the Postgres suites)" >&2
    exec "$@"
  else
    echo "Postgres 15 server binaries not found in $PGBIN; install Debian's postgresql package or set DATABASE_URL" >&2
    exit 1
  fi
fi

PGROOT=$(mktemp -d /tmp/s8flow-pg.XXXXXX)
PORT=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
if [ "$(id -u)" = 0 ]; then
  chown postgres "$PGROOT"
  RUN_AS=postgres
  as_pg() { su postgres -s /bin/bash -c "$*"; }
else
  RUN_AS=""
  as_pg() { bash -c "$*"; }
fi
as_pg "$PGBIN/initdb -D $PGROOT/data -A trust -U postgres --no-sync" >/dev/null
as_pg "$PGBIN/pg_ctl -D $PGROOT/data -l $PGROOT/server.log -w start \
  -o \"-p $PORT -k $PGROOT -c listen_addresses=127.0.0.1 -c max_connections=300 -c track_commit_timestamp=on ${FLOW_PG_OPTS:-}\"" >/dev/null
cleanup() {
  as_pg "$PGBIN/pg_ctl -D $PGROOT/data -m fast -w stop" >/dev/null 2>&1 || true
  rm -rf "$PGROOT"
}
trap cleanup EXIT

export DATABASE_URL="postgres://postgres@127.0.0.1:$PORT/postgres"
export FLOW_TEST_PGDATA="$PGROOT/data" FLOW_TEST_PGBIN="$PGBIN" FLOW_TEST_PG_SU="$RUN_AS"
"$@"
