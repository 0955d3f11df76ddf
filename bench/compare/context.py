"""One run's state: its arguments, services and backlog, and the databases and topics it made
(dropped and deleted at the end)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from bench.compare.backlog import Backlog, copy_database, drop_database
from bench.compare.services import Services
from bench.shared.orders import TOPIC
from bench.shared.topics import create_topic, delete_topics


@dataclass
class Context:
    args: argparse.Namespace
    services: Services
    backlog: Backlog
    run_id: str
    logdir: Path
    dbs: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)

    async def fresh(self, contender: str, suffix: str = "") -> tuple[str, str, str]:
        """A copy of the template database and a new topic: (url, topic prefix, topic)."""
        name = f"bench_{self.run_id}_{contender}{suffix}"
        self.dbs.append(name)
        url = copy_database(self.services, self.backlog, name)
        prefix = f"bench.{self.run_id}.{contender}{suffix}."
        topic = prefix + TOPIC
        await create_topic(self.services.bootstrap, topic, self.args.partitions)
        self.topics.append(topic)
        return url, prefix, topic

    def done_with(self, name_url: str) -> None:
        name = name_url.rsplit("/", 1)[-1]
        if name in self.dbs:
            self.dbs.remove(name)
            drop_database(self.services, name)

    async def close(self) -> None:
        """Drop every database this run made, the template too, and delete its topics."""
        for name in list(self.dbs):
            drop_database(self.services, name)
        drop_database(self.services, self.backlog.template)
        await delete_topics(self.services.bootstrap, self.topics)
