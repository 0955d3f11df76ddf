"""Our relay against Debezium and a naive relay: one run, one Postgres, one Kafka, one backlog.

    .venv/bin/python -m bench relay_compare         # the full comparison, writes docs/
    .venv/bin/python -m bench relay_compare --ci    # small: ours against naive, exits 1
                                                       # when a drain lost or reordered events

Full mode starts its own Postgres (wal_level=logical, for Debezium) and Kafka with
scripts/services.py in OUTBOX_CACHE_DIR=/var/cache/outbox-relay-bench (ports 55433 and
9192, controller 9193), so it never restarts the servers that tests use. --services env
(and --ci) use DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS as given instead.

Drain: producer_lib writes N events (about 300-byte JSON payloads, 1,000 keys) once into a
template database; each contender gets a copy of that database, the same rows loaded into
its outbox in 1,000-row transactions after it (for Debezium: its replication slot)
exists, and a fresh topic of --partitions partitions. Contenders:

- ours:     `python -m relay.cli run`, every setting at its default (retention=keep).
- ours-delete: the same with OUTBOX_RETENTION=delete.
- ours2:    two default processes (replicas) on the same database (only when named).
- ours-mariadb: the default process on a MariaDB outbox (--mariadb-url, default MARIADB_URL;
            only when named): the template's rows in the same order, loaded into a fresh
            migrated database there in 1,000-row transactions. Held against ours: the
            drain's events/s (bar: at least 0.5 of ours) and, in the latency phase, the
            commit-to-Kafka p99 at each load (bar: at most 2x ours).
- floor, floor-mariadb: bench/steady_floor.py's at-least-once loop (--settle: read up to a
            relay cycle's rows, send them in one produce request, delete them; each
            statement its own transaction) on the Postgres outbox (asyncpg) and on a MariaDB
            one (aiomysql, as the relay there; only when named), drained and loaded as ours
            and ours-mariadb are, in the relay's place: the cheapest program doing the same
            work. Its MariaDB/Postgres ratios are printed beside the relay's, with the same
            bars: a bar the floor misses cannot be judged on this machine.
- naive:    bench/compare/naive_relay.py: one row per transaction, one awaited send per event.
- debezium: Kafka Connect standalone with Debezium's Postgres connector (pgoutput) and
            its outbox EventRouter, from Maven Central (bench/connect/pom.xml). It reads
            the backlog from the WAL: the connector creates its slot, is stopped, the
            backlog is loaded, the connector is started again.
- ceiling, ceiling-keep: bench/compare/db_ceiling.py: the relay's claim and settle statements of
            that retention mode (delete, keep), no Kafka.
- kafka:    bench/compare/kafka_ceiling.py: the relay's publisher producing the same records from
            memory, one relay cycle's records at a time.

Pipeline ceiling of a retention mode = 1 / (1/database ceiling + 1/kafka); ours is held
against the one of its mode. Throughput = records / (last event on the topic, and for the
database relays the outbox settled - first event on the topic); start-up time is reported
apart. After each drain the whole topic is audited (bench/compare/audit.py): events
delivered, lost, duplicated, and per-key order violations, counted exactly. Latency: at each
offered load a process commits events with producer_lib at a steady rate and a consumer
takes receive time minus commit time, and the broker's append time minus commit time
(commit to Kafka), for ours, ours-mariadb, the floors and Debezium.

    .venv/bin/python -m bench relay_compare --services env --contenders ours,ours-mariadb \
        --events 100000 --latency-rates 500 --latency-seconds 60   # MariaDB beside Postgres
    .venv/bin/python -m bench relay_compare --services env \
        --contenders ours,ours-mariadb,floor,floor-mariadb ...     # and the floor of both
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.compare import cli


def main(argv: Sequence[str] | None = None) -> int:
    # The parts are in bench/compare/ (its __init__ lists them); this module is the program.
    return cli.main(argv, doc=__doc__)
