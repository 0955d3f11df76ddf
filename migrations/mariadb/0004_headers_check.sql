-- A row's headers are a JSON object (migrations/postgres/0004_headers_check.sql). The
-- json type already refuses text that is not JSON; this refuses an array, a string or
-- null. MariaDB has no NOT VALID: adding the constraint checks the rows already there,
-- which on this dialect producer_lib wrote, as objects.
ALTER TABLE outbox_events ADD CONSTRAINT IF NOT EXISTS outbox_events_headers_check
    CHECK (json_type(headers) = 'OBJECT');
