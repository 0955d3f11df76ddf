-- Roles and privilege probes of the least-privilege and no-secrets tests. The role
-- statements are Postgres's: {role} and {password} are filled in with psycopg.sql.Identifier
-- / Literal (role statements take no bind parameters). The probes run on Postgres and on
-- MariaDB alike (its accounts: privileges_mariadb.sql).

-- name: role_create
CREATE ROLE {role} LOGIN PASSWORD {password};

-- name: role_drop_owned
-- In the database the role was granted privileges on: revokes them all.
DROP OWNED BY {role};

-- name: role_drop
DROP ROLE IF EXISTS {role};

-- name: role_schema_create_grant
-- A role that may create tables in public, but not schemas in the database.
GRANT USAGE, CREATE ON SCHEMA public TO {role};

-- Probes: each is run as one role, which must (or must not) be allowed to run it.

-- name: probe_events_delete
DELETE FROM outbox_events;

-- name: probe_events_read
SELECT count(*) FROM outbox_events;

-- name: probe_events_update
UPDATE outbox_events SET attempts = attempts;

-- name: probe_processed_read
SELECT count(*) FROM processed_events;

-- name: probe_leases_update
UPDATE outbox_relay_leases SET owner = NULL;

-- name: probe_settings_update
UPDATE outbox_settings SET value = value;

-- name: probe_create_table
CREATE TABLE probe_ddl (id integer);

-- name: probe_events_drop
DROP TABLE outbox_events;
