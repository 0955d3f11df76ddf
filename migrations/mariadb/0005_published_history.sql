-- retention=keep moves published rows out of outbox_events into outbox_published
-- (migrations/postgres/0005_published_history.sql). Here the history is a plain table:
-- the purge deletes its rows in batches by published_at, as SQLite's does in
-- outbox_events (docs/design.md, "Published rows").
CREATE TABLE IF NOT EXISTS outbox_published (
    id bigint NOT NULL,
    event_id char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    topic varchar(249) NOT NULL,
    `key` varchar(1024) NOT NULL,
    shard smallint NOT NULL,
    event_type varchar(255) NOT NULL,
    payload longblob NOT NULL,
    headers json NOT NULL,
    created_at datetime(6) NOT NULL,
    attempts integer NOT NULL,
    last_error text,
    published_at datetime(6) NOT NULL,
    tenant varchar(255),
    PRIMARY KEY (id, published_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
CREATE INDEX IF NOT EXISTS outbox_published_published_idx ON outbox_published (published_at);

-- Rows already marked published move into the history; run again after a stop between
-- the two statements, the insert skips the rows it already moved.
INSERT INTO outbox_published (id, event_id, topic, `key`, shard, event_type, payload, headers,
                              created_at, attempts, last_error, published_at, tenant)
SELECT e.id, e.event_id, e.topic, e.`key`, e.shard, e.event_type, e.payload, e.headers,
       e.created_at, e.attempts, e.last_error, e.published_at, e.tenant
FROM outbox_events e
WHERE e.published_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM outbox_published p WHERE p.id = e.id);
DELETE FROM outbox_events WHERE published_at IS NOT NULL;
