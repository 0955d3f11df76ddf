-- bench/steady_floor.py's statements on a MariaDB outbox, the twins of steady_floor.sql's
-- (PyMySQL's parameter style, rendered by aiomysql). One loop takes the rows, so no row is
-- locked against another taker: MariaDB's single-table DELETE takes ORDER BY and LIMIT
-- itself, where Postgres needs a subquery.

-- name: floor_take
DELETE FROM outbox_events WHERE status = 'pending' ORDER BY id LIMIT %s
RETURNING topic, `key`, payload;

-- name: floor_read
SELECT id, topic, `key`, payload FROM outbox_events
WHERE status = 'pending' ORDER BY id LIMIT %s;

-- name: floor_settle
-- PyMySQL renders a list parameter as a parenthesised list of its values.
DELETE FROM outbox_events WHERE id IN %s;
