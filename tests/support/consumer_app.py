"""The ConsumerApp the fault tests run as a process:

    python -m consumer_lib.cli run tests.support.consumer_app:build

`build` is a factory (the CLI calls it inside the running loop). Its handler writes one
consumer_effects row per event (tests/support/consumers.py). Configured by environment:

    CONSUMER_TEST_DIALECT, _DATABASE   postgres + libpq URL, sqlite + file path, or
                                       mariadb + mysql:// URL
    CONSUMER_TEST_BOOTSTRAP, _TOPICS, _GROUP
    CONSUMER_TEST_NAME                 written to each effect row (applied_by)
    CONSUMER_TEST_ADAPTER              sqlalchemy_async | sqlalchemy_sync | psycopg_async
    CONSUMER_TEST_MAX_RECORDS, _MAX_CONCURRENT_PARTITIONS, _BACKOFF_MAX_S
    CONSUMER_TEST_HANDLER_DELAY_S      the handler sleeps this long inside the transaction

Test-only hooks (nothing here changes consumer_lib's code, only what it calls):

    CONSUMER_TEST_SESSION_TIMEOUT_MS   the Kafka group session timeout (the broker's minimum
                                       is 6000): a killed member is noticed sooner
    CONSUMER_TEST_SLOW_COMMIT_S        sleep before every Kafka offset commit, widening the
                                       window between the database commit and the offset's
    CONSUMER_TEST_CRASH=<where>:<n>    os._exit(9) at the n-th occurrence of <where>:
        in_handler            the effect row is written, the transaction not committed
        before_offset_commit  the records' transactions committed, their offsets not sent
        after_offset_commit   the broker acknowledged the offsets
    The hook writes "CONSUMER-TEST-CRASH <where> <n>" to stderr before exiting.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from aiokafka import AIOKafkaConsumer

import consumer_lib.consumer as consumer_module
from consumer_lib import ConsumedEvent, ConsumerApp, ConsumerSettings
from outbox_core.kafka_security import KafkaSecurity
from tests.support.consumers import backend_from, effect_handler, make_database

CRASH_POINTS = ("in_handler", "before_offset_commit", "after_offset_commit")


def _env(name: str, default: str | None = None) -> str:
    value = os.environ.get(f"CONSUMER_TEST_{name}", default)
    if value is None:
        raise KeyError(f"CONSUMER_TEST_{name} is not set")
    return value


def crash(where: str, n: int) -> None:
    sys.stderr.write(f"CONSUMER-TEST-CRASH {where} {n}\n")
    sys.stderr.flush()
    os._exit(9)


class _Counter:
    """Counts occurrences of the chosen crash point; crashes at the n-th."""

    def __init__(self, spec: str) -> None:
        where, _, n = spec.partition(":") if spec else ("", "", "0")
        if where and where not in CRASH_POINTS:
            raise ValueError(f"CONSUMER_TEST_CRASH: unknown point {where!r}")
        self.where = where
        self.at = int(n or 0)
        self.seen = 0

    def hit(self, where: str) -> None:
        if where != self.where:
            return
        self.seen += 1
        if self.seen == self.at:
            crash(where, self.at)


def _patch_kafka(crasher: _Counter, session_timeout_ms: int, slow_commit_s: float) -> None:
    """Wrap the AIOKafkaConsumer that consumer_lib creates: group timing and commit hooks."""
    original = AIOKafkaConsumer

    def make(*args: Any, **kw: Any) -> Any:
        if session_timeout_ms:
            kw.setdefault("session_timeout_ms", session_timeout_ms)
            kw.setdefault("heartbeat_interval_ms", max(100, session_timeout_ms // 6))
        kafka = original(*args, **kw)
        commit = kafka.commit

        async def hooked_commit(offsets: Any = None) -> None:
            if slow_commit_s:
                await asyncio.sleep(slow_commit_s)
            crasher.hit("before_offset_commit")
            await commit(offsets)
            crasher.hit("after_offset_commit")

        kafka.commit = hooked_commit
        return kafka

    vars(consumer_module)["AIOKafkaConsumer"] = make  # what Consumer.run() instantiates


def build() -> ConsumerApp:
    crasher = _Counter(_env("CRASH", ""))
    _patch_kafka(
        crasher,
        int(_env("SESSION_TIMEOUT_MS", "0")),
        float(_env("SLOW_COMMIT_S", "0")),
    )
    backend = backend_from(_env("DIALECT"), _env("DATABASE"))
    adapter = _env("ADAPTER", "psycopg_async")
    group = _env("GROUP")
    settings = ConsumerSettings(
        security=KafkaSecurity.plaintext(),
        bootstrap_servers=_env("BOOTSTRAP"),
        group_id=group,
        client_id=f"consumer-test-{_env('NAME')}",
        max_records=int(_env("MAX_RECORDS", "500")),
        max_concurrent_partitions=int(_env("MAX_CONCURRENT_PARTITIONS", "4")),
        max_attempts=3,
        backoff_base_s=0.05,
        backoff_max_s=float(_env("BACKOFF_MAX_S", "1.0")),
        purge_interval_s=3600.0,
    )
    app = ConsumerApp(settings, make_database(adapter, backend))

    def after_write(event: ConsumedEvent) -> None:
        crasher.hit("in_handler")

    handler = effect_handler(
        adapter,
        backend.dialect,
        group,
        applied_by=_env("NAME"),
        delay_s=float(_env("HANDLER_DELAY_S", "0")),
        after_write=after_write,
    )
    for topic in _env("TOPICS").split(","):
        app.handler(topic)(handler)
    return app


def not_an_app() -> str:
    """For the CLI test: a factory that returns something else."""
    return "not a ConsumerApp"
