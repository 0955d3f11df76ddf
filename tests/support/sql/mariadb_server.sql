-- MariaDB read-backs and probes for the tests of the test server itself
-- (tests/integration/test_mariadb_server.py). PyMySQL's parameter style: %(name)s.

-- name: current_database
SELECT DATABASE();

-- name: database_exists
SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = %(name)s;

-- name: tables
SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()
ORDER BY table_name;

-- name: jobs_create
CREATE TABLE jobs (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(40) NOT NULL
) ENGINE = InnoDB;

-- name: jobs_insert
INSERT INTO jobs (name) VALUES (%(name)s) RETURNING id, name;

-- name: jobs_delete
DELETE FROM jobs WHERE id = %(id)s RETURNING id, name;

-- name: jobs_rename
-- MariaDB 10.11 has no UPDATE ... RETURNING: the tests expect a syntax error.
UPDATE jobs SET name = %(name)s WHERE id = %(id)s RETURNING id;

-- name: jobs_names
SELECT name FROM jobs ORDER BY id;

-- name: jobs_lock_first
SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE;

-- name: jobs_lock_unlocked
SELECT id FROM jobs ORDER BY id FOR UPDATE SKIP LOCKED;

-- name: lock_wait_short
-- A locking read that waits fails in a second instead of the default 50.
SET SESSION innodb_lock_wait_timeout = 1;

-- name: read_committed
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;

-- name: isolation
SELECT @@tx_isolation;

-- name: bind_address
SELECT @@bind_address;
