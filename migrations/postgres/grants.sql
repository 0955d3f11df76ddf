-- Least-privilege grants for the three parts of the outbox, Postgres. Not a migration:
-- run it once after `outbox-relay migrate`, as the owner of the outbox tables, naming
-- the login role of each part with psql variables:
--
--   psql "$OWNER_URL" -v ON_ERROR_STOP=1 -v producer_role=orders_app \
--        -v relay_role=outbox_relay -v consumer_role=billing_consumer -f grants.sql
--
-- Each part's block can also be run alone (copy it, or see how
-- tests/integration/test_least_privilege.py runs the named blocks one by one). The tables
-- are unqualified, as the migrations create them: in the first schema of the owner's
-- search_path (public unless you changed it). No part does DDL at run time (the relay's partitions of kept rows are made and
-- dropped by a function that runs as the owner); schema
-- changes (`outbox-relay migrate`) need the owner. outbox_events.id is an identity
-- column: inserting needs no privilege on its sequence (the relay reads it). The
-- grants_relay_monitoring block needs a superuser. docs/security.md explains every grant.

-- name: grants_producer
-- producer_lib, in your service's transactions: insert events, remember idempotency
-- keys, read the shard count once per Outbox. It never reads, changes or deletes events.
GRANT USAGE ON SCHEMA public TO :"producer_role";
GRANT SELECT ON outbox_settings TO :"producer_role";
GRANT INSERT ON outbox_events TO :"producer_role";
GRANT SELECT, INSERT ON outbox_idempotency TO :"producer_role";

-- name: grants_relay
-- outbox-relay run: claim, settle (delete or mark) and retain events, leases and
-- membership, purge old idempotency keys; start-up checks read the migrations and the
-- shard count. The operator commands (status, parked, replay) need the same grants.
GRANT USAGE ON SCHEMA public TO :"relay_role";
GRANT SELECT ON outbox_settings, outbox_schema_migrations TO :"relay_role";
-- INSERT: a replay moves a kept row back from outbox_published under its own id.
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_events TO :"relay_role";
-- retention=keep moves settled rows into outbox_published; the purge deletes the few its
-- DEFAULT partition holds and rotates the partitions through the one function that may
-- (SECURITY DEFINER: it creates and drops partitions as the owner, the relay does no DDL).
GRANT SELECT, INSERT, DELETE ON outbox_published TO :"relay_role";
GRANT SELECT, DELETE ON outbox_published_default TO :"relay_role";
GRANT EXECUTE ON FUNCTION outbox_published_rotate(float8, bigint, bigint, integer)
    TO :"relay_role";
GRANT SELECT, INSERT, UPDATE ON outbox_relay_leases TO :"relay_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_relay_replicas TO :"relay_role";
GRANT SELECT, DELETE ON outbox_idempotency TO :"relay_role";
-- Claim floors read the last id drawn (pg_sequence_last_value); they draw none.
GRANT SELECT ON SEQUENCE outbox_events_id_seq TO :"relay_role";

-- name: grants_relay_monitoring
-- Optional, and run by a superuser (or a role with ADMIN on pg_read_all_stats): lets the
-- relay see the xid, xmin and state of other roles' sessions in pg_stat_activity, so its
-- horizon gauges and warnings can name a session of any role that holds vacuum back.
-- pg_locks, pg_replication_slots and pg_prepared_xacts are readable by every role.
GRANT pg_read_all_stats TO :"relay_role";

-- name: grants_consumer
-- consumer_lib: record (group, event_id) in the handler's transaction, purge old rows,
-- keep the records its dead-letter topic can never take. Grant the consumer's own
-- business tables separately; it never sees the outbox.
GRANT USAGE ON SCHEMA public TO :"consumer_role";
GRANT SELECT, INSERT, DELETE ON processed_events TO :"consumer_role";
GRANT INSERT ON consumer_dead_letters TO :"consumer_role";
