#!/usr/bin/env bash
# The part of the official postgres entrypoint the tests rely on: a first start creates
# the cluster with POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, password auth over TCP.
set -euo pipefail
if [ "${1:-}" != postgres ]; then
  exec "$@"
fi
shift
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
  user="${POSTGRES_USER:-postgres}"
  db="${POSTGRES_DB:-$user}"
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 \
    --auth-local=trust --auth-host=scram-sha-256 > /dev/null
  rm -f "$pwfile"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
    psql -v ON_ERROR_STOP=1 -qAt -U "$user" -d postgres -c "CREATE DATABASE \"$db\""
    pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
  fi
  echo "docker-entrypoint: initialised $PGDATA for user $user, database $db"
fi
exec postgres -D "$PGDATA" "$@"
