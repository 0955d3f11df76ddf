-- Set-up statements of the pooler and timeout tests (tests/integration/test_pooler.py),
-- Postgres.

-- name: pooler_lock_outbox
-- What a DDL or a LOCK TABLE in someone's open transaction does to the relay's claims.
LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE;

-- name: pooler_hang_heartbeat
-- A statement of the relay that never returns by itself: every membership heartbeat
-- sleeps for an hour in a trigger (no lock wait: only statement_timeout can end it).
CREATE FUNCTION test_hang() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(3600);
    RETURN NEW;
END
$$;
CREATE TRIGGER test_hang BEFORE INSERT OR UPDATE ON outbox_relay_replicas
FOR EACH ROW EXECUTE FUNCTION test_hang();

-- name: pooler_lock_waiters
-- Sessions of this database waiting for a lock (tests/integration/test_asyncpg_pool.py).
SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND datname = current_database();
