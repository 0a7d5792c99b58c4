#!/usr/bin/env bash
# Runs a command with a PgBouncer 1.18 in transaction mode in front of DATABASE_URL (start one
# with scripts/with-postgres.sh first). Exports FLOW_TEST_PGBOUNCER_URL, the pooled URL with
# ?pgbouncer=true, which test/support/db.ts then opens every Postgres test store through (one
# role a test schema, whose search_path names it: a pooler sends no startup options).
# As root it installs Debian's pgbouncer when it is missing.
set -euo pipefail
if [ -z "${DATABASE_URL:-}" ]; then echo "with-pgbouncer.sh needs DATABASE_URL (run it under scripts/with-postgres.sh)" >&2; exit 1; fi

PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
if [ ! -x "$PGBOUNCER" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null
    PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  else
    echo "pgbouncer not found; install Debian's pgbouncer package" >&2
    exit 1
  fi
fi

PGHOST_PORT=$(node -e "const u=new URL(process.env.DATABASE_URL);console.log(u.hostname+' '+(u.port||5432)+' '+(u.username||'postgres')+' '+u.pathname.slice(1))")
read -r PG_HOST PG_PORT PG_USER PG_DB <<<"$PGHOST_PORT"
PORT=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
DIR=$(mktemp -d /tmp/s8flow-pgbouncer.XXXXXX)
echo "\"$PG_USER\" \"\"" >"$DIR/users.txt"
# auth_user looks every other role up in pg_shadow, so a test's own role logs in as itself
cat >"$DIR/pgbouncer.ini" <<INI
[databases]
* = host=$PG_HOST port=$PG_PORT
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $DIR/users.txt
auth_user = $PG_USER
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
server_idle_timeout = 10
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
INI
if [ "$(id -u)" = 0 ]; then
  chown -R postgres "$DIR"
  su postgres -s /bin/bash -c "$PGBOUNCER -d $DIR/pgbouncer.ini"
else
  "$PGBOUNCER" -d "$DIR/pgbouncer.ini"
fi
cleanup() {
  kill "$(cat "$DIR/pgbouncer.pid" 2>/dev/null)" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
for _ in $(seq 50); do [ -s "$DIR/pgbouncer.pid" ] && break; sleep 0.1; done

export FLOW_TEST_PGBOUNCER_URL="postgres://$PG_USER@127.0.0.1:$PORT/$PG_DB?pgbouncer=true"
"$@"
