"""Every bench: its name (`python -m bench NAME`), the module whose `main(argv)` runs it, the
question it answers and the section of docs/benchmarks.md its results feed. The listing of
`python -m bench` and the tests read this table; a bench not in it is not kept."""

from __future__ import annotations

from dataclasses import dataclass

DOCS = "docs/benchmarks.md"


@dataclass(frozen=True)
class Bench:
    name: str  # also the module, bench/<name>.py
    question: str
    anchor: str  # a heading of docs/benchmarks.md

    @property
    def docs(self) -> str:
        return f"{DOCS}#{self.anchor}"


BENCHES = (
    Bench(
        "emit_overhead",
        "What does emit add to a one-row business transaction?",
        "producer-emit-overhead",
    ),
    Bench(
        "relay_compare",
        "How fast does the relay drain a backlog, against Debezium, a naive relay and the "
        "ceilings, and with what latency to a consumer?",
        "relay-against-debezium-and-a-naive-relay",
    ),
    Bench(
        "relay_latency",
        "What is the commit-to-Kafka latency at steady offered loads, and what does an "
        "idle relay cost?",
        "latency-commit-to-kafka",
    ),
    Bench(
        "relay_fleet",
        "What do N relays on one database cost against one, idle and under a steady load?",
        "relay-a-fleet-of-relays-on-one-database-active-replicas-and-standbys",
    ),
    Bench(
        "steady_floor",
        "What does the cheapest loop these drivers allow cost at a steady load?",
        "the-floor-the-cheapest-loop-these-drivers-allow",
    ),
    Bench(
        "tenant_fairness",
        "Does one tenant's backlog delay another tenant's events?",
        "relay-fair-turns-between-tenants",
    ),
    Bench(
        "large_events",
        "How fast does the relay drain large events, against the broker alone, and in how "
        "much memory?",
        "relay-large-events",
    ),
    Bench(
        "record_formats",
        "Are the relay's debezium records the ones Debezium's EventRouter writes, and does each "
        "record format drain at least 0.9 of native's rate?",
        "relay-record-formats",
    ),
    Bench(
        "relay_transactions",
        "How fast does the relay drain with Kafka transactions (kafka_transactions), against "
        "without?",
        "relay-kafka-transactions",
    ),
    Bench(
        "consumer_throughput",
        "How many events a second does consumer_lib apply, against plain aiokafka consumers?",
        "consumer_lib-apply-throughput",
    ),
)
BY_NAME = {bench.name: bench for bench in BENCHES}
