-- A row's headers are a JSON object (of strings: producer_lib writes nothing else). A
-- writer other than producer_lib could store an array, a string or null, which no record
-- can carry. The constraint is added NOT VALID: new writes are checked, rows already in
-- the table are not read (the ALTER holds its lock for milliseconds, whatever the table's
-- size, and cannot fail on a row written before it). The relay parks any such old row as
-- MalformedRow. To have Postgres vouch for the old rows too, once none is left run
--     ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_headers_check;
-- which reads the table without blocking writes (docs/compatibility.md).
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_headers_check
    CHECK (jsonb_typeof(headers) = 'object') NOT VALID;
