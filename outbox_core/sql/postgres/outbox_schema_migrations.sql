-- The migrator's bookkeeping, Postgres dialect.

-- name: migration_table_create
CREATE TABLE IF NOT EXISTS outbox_schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migration_lock
-- Session-level, so it spans the one transaction per migration; two migrators queue here.
SELECT pg_advisory_lock(%(lock_ns)s::int, 0);

-- name: migration_unlock
SELECT pg_advisory_unlock(%(lock_ns)s::int, 0);

-- name: migration_list
SELECT version, name, checksum FROM outbox_schema_migrations ORDER BY version;

-- name: migration_record
INSERT INTO outbox_schema_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s);


-- name: migration_schema_of_outbox
-- The schema holding the outbox tables; with none yet, where they would be created.
SELECT coalesce(
    (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = to_regclass('outbox_settings')),
    current_schema());

-- name: migration_reference_create
-- A scratch schema the migrations are applied in, to compare existing tables against what
-- they create; its transaction is always rolled back.
CREATE SCHEMA outbox_migration_reference;

-- name: migration_reference_use
SET LOCAL search_path TO outbox_migration_reference;

-- name: migration_describe_tables
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND (%(tables)s::text[] IS NULL OR c.relname = ANY(%(tables)s::text[]))
ORDER BY 1;

-- name: migration_describe_columns
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity, a.attgenerated
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND a.attnum > 0
  AND NOT a.attisdropped
  AND (%(tables)s::text[] IS NULL OR c.relname = ANY(%(tables)s::text[]))
ORDER BY 1, 2;

-- name: migration_describe_indexes
-- Without the schema's name, so the scratch schema's definitions compare equal.
SELECT c.relname, i.relname, replace(pg_get_indexdef(i.oid), quote_ident(%(schema)s) || '.', '')
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class c ON c.oid = x.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND NOT c.relispartition
  AND (%(tables)s::text[] IS NULL OR c.relname = ANY(%(tables)s::text[]))
ORDER BY 1, 2;

-- name: migration_describe_constraints
-- NOT VALID says whether the rows were checked, not what the schema is: a constraint an
-- operator validated after migrating (or never) is the same constraint.
SELECT c.relname, k.conname, k.contype::text,
       regexp_replace(pg_get_constraintdef(k.oid), ' NOT VALID$', '')
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND NOT c.relispartition
  AND (%(tables)s::text[] IS NULL OR c.relname = ANY(%(tables)s::text[]))
ORDER BY 1, 2;
