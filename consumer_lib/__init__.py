"""Apply Kafka events exactly once by recording their event_id with the handler's writes."""
