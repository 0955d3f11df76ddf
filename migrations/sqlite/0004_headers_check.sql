-- A row's headers are a JSON object; see the Postgres twin. SQLite adds a CHECK only by
-- rebuilding the table, so two triggers check new writes instead (rows already in the
-- table are not read; the relay parks any old row that is not an object as MalformedRow).
-- json_type() raises on text that is not JSON at all: json_valid() first, for one message.
CREATE TRIGGER outbox_events_headers_insert BEFORE INSERT ON outbox_events
WHEN CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) IS NOT 'object' ELSE 1 END
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: outbox_events_headers_check');
END;

CREATE TRIGGER outbox_events_headers_update BEFORE UPDATE OF headers ON outbox_events
WHEN CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) IS NOT 'object' ELSE 1 END
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: outbox_events_headers_check');
END;
