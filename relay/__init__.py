"""The relay: publishes committed outbox events to Kafka, in order per key."""
