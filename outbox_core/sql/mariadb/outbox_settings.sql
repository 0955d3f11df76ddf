-- Queries on outbox_settings, MariaDB dialect.

-- name: setting_get
SELECT value FROM outbox_settings WHERE name = %(name)s;

-- name: setting_put
INSERT INTO outbox_settings (name, value) VALUES (%(name)s, %(value)s)
ON DUPLICATE KEY UPDATE value = VALUES(value);

-- name: setting_put_missing
-- For a schema made without its shard_count row. INSERT IGNORE would also swallow other
-- errors (a value too long): a no-op update ignores only the duplicate key.
INSERT INTO outbox_settings (name, value) VALUES (%(name)s, %(value)s)
ON DUPLICATE KEY UPDATE name = name;
