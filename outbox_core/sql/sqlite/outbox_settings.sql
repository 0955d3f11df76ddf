-- Queries on outbox_settings, SQLite dialect.

-- name: setting_get
SELECT value FROM outbox_settings WHERE name = :name;

-- name: setting_put
INSERT INTO outbox_settings (name, value) VALUES (:name, :value)
ON CONFLICT (name) DO UPDATE SET value = excluded.value;

-- name: setting_put_missing
INSERT INTO outbox_settings (name, value) VALUES (:name, :value)
ON CONFLICT (name) DO NOTHING;
