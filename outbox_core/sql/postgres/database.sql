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

-- name: database_horizon
-- What keeps vacuum from removing dead rows anywhere in the database (the outbox's
-- included): the oldest of each kind, with what an operator needs to find its owner.
-- transaction: an open transaction that holds an xid (it wrote); snapshot: the oldest
-- backend_xmin, a transaction or statement still seeing old rows (a long report,
-- `idle in transaction`, REPEATABLE READ); replication_slot: a slot's xmin or
-- catalog_xmin (a lagging or abandoned consumer, hot_standby_feedback through a physical
-- slot); prepared_xact: a PREPARE TRANSACTION never committed or rolled back. Without
-- pg_read_all_stats, other roles' sessions show no xid, xmin or state.
WITH activity AS (
    SELECT pid, application_name, state, xact_start, backend_xid, backend_xmin
    FROM pg_stat_activity
    -- Sessions of other databases do not hold this one's tables back (NULL: a WAL
    -- sender, whose hot_standby_feedback does).
    WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datname IS NULL)
),
holders AS (
    (SELECT 'transaction' AS kind,
            extract(epoch FROM now() - xact_start)::float8 AS age_s,
            age(backend_xid)::bigint AS xid_age, pid, application_name, state
     FROM activity WHERE backend_xid IS NOT NULL
     ORDER BY age(backend_xid) DESC LIMIT 1)
    UNION ALL
    (SELECT 'snapshot', extract(epoch FROM now() - xact_start)::float8,
            age(backend_xmin)::bigint, pid, application_name, state
     FROM activity WHERE backend_xmin IS NOT NULL
     ORDER BY age(backend_xmin) DESC LIMIT 1)
    UNION ALL
    (SELECT 'replication_slot', NULL::float8,
            greatest(age(xmin), age(catalog_xmin))::bigint, active_pid, NULL::text,
            slot_name::text
     FROM pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
     ORDER BY greatest(age(xmin), age(catalog_xmin)) DESC LIMIT 1)
    UNION ALL
    (SELECT 'prepared_xact', extract(epoch FROM now() - prepared)::float8,
            age(transaction)::bigint, NULL::int, NULL::text, gid
     FROM pg_prepared_xacts
     ORDER BY prepared LIMIT 1)
)
SELECT kind, age_s, xid_age, pid, application_name, state FROM holders;
