-- Statements the benchmark runs on the server itself, outside its private database.
-- {dbname} is filled in with psycopg.sql.Identifier, never by string formatting.

-- name: bench_database_create
CREATE DATABASE {dbname};

-- name: bench_database_drop
DROP DATABASE IF EXISTS {dbname} WITH (FORCE);

-- name: server_version
SELECT version();
