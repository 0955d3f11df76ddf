-- Database-wide statements, Postgres dialect.

-- name: notify_listen
-- {channel} is filled in with psycopg.sql.Identifier from a validated setting.
LISTEN {channel};

-- name: session_settings_local
-- Opens each transaction behind a transaction pooler (outbox_core/pg_session.py), where a
-- connection's settings cannot be given at start-up nor outlive the transaction:
-- set_config(name, value, true) is SET LOCAL, for this transaction only.
SELECT count(set_config(s.name, s.value, true)) AS applied
FROM unnest(%(names)s::text[], %(values)s::text[]) AS s(name, value);

-- name: session_settings_show
-- The values in force of the named settings, in their base units (statement_timeout in
-- ms), as the session settings give them: a pool checks its settings took.
SELECT name, setting FROM pg_settings WHERE name = ANY(%(names)s::text[]) ORDER BY name;
