-- Least-privilege grants for the three parts of the outbox, MariaDB. Not a migration:
-- run it once after `outbox-relay migrate`, on the outbox's database, as an account that
-- holds these privileges WITH GRANT OPTION (the one that migrated, usually), naming the
-- accounts of the parts in session variables (the host defaults to '%'):
--
--   mariadb --database=orders \
--     --init-command="SET @producer='orders_app', @relay='outbox_relay', @consumer='billing_consumer'" \
--     < grants.sql
--
-- The mariadb client has no variables of its own, so every GRANT is built from them with
-- EXECUTE IMMEDIATE (MariaDB 10.2 and later; MySQL has none). Each part's block can also be
-- run alone (tests/integration/test_least_privilege.py runs the named blocks one by one).
-- The tables are unqualified: the grants land on the current database. No part does DDL at
-- run time; schema changes (`outbox-relay migrate`) need the owner's account.
-- outbox_events.id is an AUTO_INCREMENT column: inserting needs no other privilege.
-- docs/security.md explains every grant.

-- name: grants_producer
-- producer_lib, in your service's transactions: lock its keys' rows of outbox_key_locks
-- (SELECT ... FOR UPDATE needs SELECT only), insert events, remember idempotency keys,
-- read the shard count once per Outbox. It never reads, changes or deletes events.
SET @outbox_account = CONCAT(QUOTE(@producer), '@', QUOTE(COALESCE(@host, '%')));
EXECUTE IMMEDIATE CONCAT('GRANT SELECT ON outbox_settings TO ', @outbox_account);
EXECUTE IMMEDIATE CONCAT('GRANT SELECT ON outbox_key_locks TO ', @outbox_account);
EXECUTE IMMEDIATE CONCAT('GRANT INSERT ON outbox_events TO ', @outbox_account);
EXECUTE IMMEDIATE CONCAT('GRANT SELECT, INSERT ON outbox_idempotency TO ', @outbox_account);

-- name: grants_relay
-- outbox-relay run: claim, settle (delete, or move into outbox_published) and record
-- failures, leases and membership, purge old idempotency keys and kept rows; start-up
-- checks read the migrations and the shard count. The operator commands (status, parked,
-- replay) need the same grants.
SET @outbox_account = CONCAT(QUOTE(@relay), '@', QUOTE(COALESCE(@host, '%')));
EXECUTE IMMEDIATE CONCAT('GRANT SELECT ON outbox_settings TO ', @outbox_account);
EXECUTE IMMEDIATE CONCAT('GRANT SELECT ON outbox_schema_migrations TO ', @outbox_account);
-- INSERT: a replay moves a kept row back from outbox_published under its own id.
EXECUTE IMMEDIATE CONCAT(
    'GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_events TO ', @outbox_account);
-- retention=keep copies settled rows into outbox_published (a plain table here: the purge
-- deletes old rows, no partitions are made or dropped).
EXECUTE IMMEDIATE CONCAT('GRANT SELECT, INSERT, DELETE ON outbox_published TO ', @outbox_account);
EXECUTE IMMEDIATE CONCAT(
    'GRANT SELECT, INSERT, UPDATE ON outbox_relay_leases TO ', @outbox_account);
EXECUTE IMMEDIATE CONCAT(
    'GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_relay_replicas TO ', @outbox_account);
EXECUTE IMMEDIATE CONCAT('GRANT SELECT, DELETE ON outbox_idempotency TO ', @outbox_account);

-- name: grants_consumer
-- consumer_lib: record (group, event_id) in the handler's transaction, purge old rows,
-- keep the records its dead-letter topic can never take. Grant the consumer's own
-- business tables separately; it never sees the outbox.
SET @outbox_account = CONCAT(QUOTE(@consumer), '@', QUOTE(COALESCE(@host, '%')));
EXECUTE IMMEDIATE CONCAT(
    'GRANT SELECT, INSERT, DELETE ON processed_events TO ', @outbox_account);
EXECUTE IMMEDIATE CONCAT('GRANT INSERT ON consumer_dead_letters TO ', @outbox_account);
