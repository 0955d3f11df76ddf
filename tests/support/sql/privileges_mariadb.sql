-- Accounts of the least-privilege test, MariaDB (PyMySQL's parameter style: %(name)s; a
-- literal % is written %%). The privilege probes are privileges.sql's, which run here too.

-- name: user_create
CREATE USER %(user)s@'%%' IDENTIFIED BY %(password)s;

-- name: user_drop
-- Drops the account and every privilege it was granted, on any database.
DROP USER IF EXISTS %(user)s@'%%';

-- name: grant_accounts
-- The session variables migrations/mariadb/grants.sql builds its GRANTs from.
SET @producer = %(producer)s, @relay = %(relay)s, @consumer = %(consumer)s, @host = '%%';
