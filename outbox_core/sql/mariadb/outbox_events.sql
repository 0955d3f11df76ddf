-- Queries on outbox_events, MariaDB dialect. So far only what the migrator needs; the
-- shared statements (sql/shared/outbox_events.sql) join once this file writes their
-- fragments.

-- name: outbox_count_unpublished
SELECT count(*) FROM outbox_events WHERE published_at IS NULL;
