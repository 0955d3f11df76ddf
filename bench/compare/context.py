"""One run's state: its arguments, services and backlog, and the databases and topics it made
(dropped and deleted at the end)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from bench.compare.backlog import (
    Backlog,
    copy_database,
    drop_database,
    load_backlog,
    load_backlog_mariadb,
)
from bench.compare.common import MARIADB_TWINS, QM, say
from bench.compare.services import Services
from bench.shared.database import with_database
from bench.shared.orders import TOPIC
from bench.shared.topics import APPEND_TIME, create_topic, delete_topics
from outbox_core.database_url import DatabaseUrl
from outbox_core.migrate import migrate

LATENCY_SUFFIX = "_latency"


@dataclass
class Context:
    args: argparse.Namespace
    services: Services
    backlog: Backlog
    run_id: str
    logdir: Path
    dbs: list[str] = field(default_factory=list)
    mariadb_dbs: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)

    async def fresh(self, contender: str, suffix: str = "") -> tuple[str, str, str]:
        """A copy of the template database (for a MariaDB contender: an empty, migrated
        database on --mariadb-url) and a new topic: (url, topic prefix, topic). A latency
        topic's records carry the broker's append time."""
        name = f"bench_{self.run_id}_{contender}{suffix}"
        if contender in MARIADB_TWINS:
            # A MariaDB URL names a database of letters, digits, _ and $ only.
            url = self._mariadb_database(name.replace("-", "_"))
        else:
            self.dbs.append(name)
            url = copy_database(self.services, self.backlog, name)
        prefix = f"bench.{self.run_id}.{contender}{suffix}."
        topic = prefix + TOPIC
        configs = APPEND_TIME if suffix == LATENCY_SUFFIX else None
        await create_topic(self.services.bootstrap, topic, self.args.partitions, configs)
        self.topics.append(topic)
        return url, prefix, topic

    def load(self, url: str, events: int) -> float:
        """The backlog's first `events` rows into the fresh outbox at url; returns seconds."""
        if DatabaseUrl.parse(url).dialect == "mariadb":
            template = with_database(self.services.url, self.backlog.template)
            return load_backlog_mariadb(template, url, events)
        return load_backlog(url, events)

    def _mariadb_database(self, name: str) -> str:
        self._mariadb_admin("bench_database_create", name)
        self.mariadb_dbs.append(name)
        url = with_database(self.args.mariadb_url, name)
        migrate(url)
        return url

    def _mariadb_admin(self, block: str, name: str) -> None:
        conn = DatabaseUrl.parse(self.args.mariadb_url).connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(QM[block].format(dbname=name))
        finally:
            conn.close()

    def done_with(self, name_url: str) -> None:
        name = name_url.rsplit("/", 1)[-1]
        if name in self.dbs:
            self.dbs.remove(name)
            drop_database(self.services, name)
        if name in self.mariadb_dbs:
            self.mariadb_dbs.remove(name)
            self._mariadb_admin("bench_database_drop", name)

    async def close(self) -> None:
        """Drop every database this run made, the template too, and delete its topics."""
        for name in list(self.dbs):
            drop_database(self.services, name)
        for name in list(self.mariadb_dbs):
            try:
                self._mariadb_admin("bench_database_drop", name)
            except Exception as exc:
                say(f"could not drop {name} on MariaDB: {exc}")
        drop_database(self.services, self.backlog.template)
        await delete_topics(self.services.bootstrap, self.topics)
