-- Queries on outbox_settings, Postgres dialect.

-- name: setting_get
SELECT value FROM outbox_settings WHERE name = %(name)s;

-- name: setting_put
INSERT INTO outbox_settings (name, value) VALUES (%(name)s, %(value)s)
ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;

-- name: setting_put_missing
-- For a schema adopted without its shard_count row (made by Alembic).
INSERT INTO outbox_settings (name, value) VALUES (%(name)s, %(value)s)
ON CONFLICT (name) DO NOTHING;
