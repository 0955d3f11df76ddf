-- The consumer tests' statements every database takes alike (`:name` parameters, in each
-- driver's style at load), one scope with consumer_<dialect>.sql.

-- name: effect_insert
-- The handler's write, in the transaction consumer_lib opened for the record.
INSERT INTO consumer_effects (
    consumer_group, event_id, event_key, event_type, topic, kafka_partition, kafka_offset, n,
    applied_by
) VALUES (
    :consumer_group, :event_id, :event_key, :event_type, :topic, :kafka_partition,
    :kafka_offset, :n, :applied_by
);

-- name: effects_all
SELECT consumer_group, event_id, event_key, event_type, topic, kafka_partition, kafka_offset,
       n, applied_by, id
FROM consumer_effects ORDER BY id;
