-- Database-wide statements, Postgres dialect.

-- name: notify_listen
-- {channel} is filled in with psycopg.sql.Identifier from a validated setting.
LISTEN {channel};
