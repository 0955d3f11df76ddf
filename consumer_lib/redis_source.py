"""Applying events from Redis Streams: the same ConsumerApp and handlers as the Kafka path.

One consumer of a consumer group per process. New entries come from XREADGROUP `>`; each
is applied in order: in one database transaction the (group, event_id) row and the
handler's writes; only after the commit is the entry XACKed. A crash between the two
leaves it pending: another consumer claims it (XAUTOCLAIM of entries idle longer than
claim_idle_s, at start and every claim_interval_s, walking the cursor back to 0-0) and
the dedup row makes the second apply a no-op before the ack. A paused consumer that
resumes after its entries were claimed finds them applied: its apply is skipped and its
XACK is harmless.

What becomes of an entry is decided by the Kafka consumer's apply policy
(consumer_lib.apply), so both sources treat a missing event_id, an unhandled type, a
failing handler and a transient failure alike: a transient failure (the database briefly
away) leaves the entry pending and is retried without limit; an entry that cannot be
decoded, or whose handler fails max_attempts times, is added to the dead-letter stream
with its origin and error and acked in the same MULTI/EXEC. When Redis refuses that for
good (no permission on the dead-letter stream, a key of another type there), the entry is
kept in consumer_dead_letters in the consumer's database and acked. Pending entries whose
body was trimmed away (XAUTOCLAIM's deleted ids) are counted as lost and logged, never as
applied.

Per-key order holds within one consumer (entries are applied one at a time, in stream
order); with several consumers in a group, Redis hands entries to whichever asks, so a
key's events may be applied concurrently: run one consumer per group where that matters.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiokafka import TopicPartition

from consumer_lib.app import ConsumerApp
from consumer_lib.apply import Abandon, ApplyPolicy, Outcome
from consumer_lib.dead_letters import DeadLetterRow, keep_in_table
from consumer_lib.errors import ConsumerConfigError, DeadLetterFailure, is_transient
from consumer_lib.event import SourceRecord
from consumer_lib.redis_entries import EntryRecord, dead_letter_fields, entry_millis, entry_record
from consumer_lib.redis_metrics import RedisOutcomes, RedisSourceMetrics
from consumer_lib.redis_settings import RedisSourceSettings
from outbox_core.backoff import Backoff
from outbox_core.driver_errors import first_line
from outbox_core.ops_http import OpsServer, Probe
from outbox_core.redis_connection import RedisFailure, classify, connect
from outbox_core.supervisor import Supervisor

log = logging.getLogger("consumer_lib.redis")
T = TypeVar("T")
Entry = tuple[bytes, dict[bytes, bytes] | None]


class RedisSource:
    def __init__(self, app: ConsumerApp, settings: RedisSourceSettings) -> None:
        if not app.topics:
            raise ConsumerConfigError("register at least one handler before running")
        self.app = app
        self.settings = settings
        self.group = app.settings.group_id
        self.metrics = RedisSourceMetrics()
        self.stats = self.metrics.stats
        self.supervisor = Supervisor(log)
        self._client = connect(settings.redis)
        self._topic_of = {settings.stream_for(t): t for t in app.topics}
        self._redis_ok = False  # the last Redis step succeeded
        self.ops: OpsServer | None = None
        self.revoking = asyncio.Event()  # never set: a stream has no partitions to give up
        self.policy = ApplyPolicy(
            app,
            supervisor=self.supervisor,
            observer=RedisOutcomes(self.metrics, settings.stream_for),
            dead_letters=self,
            offsets=self,
        )

    def taking(self, tp: TopicPartition) -> bool:
        """The policy's Ownership: every stream is this consumer's while it runs."""
        return True

    def stop(self) -> None:
        self.supervisor.stop()

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except Exception as exc:
            if isinstance(exc, RedisFailure):
                raise
            raise classify(exc) from exc

    def healthz(self) -> Probe:
        """Alive: the loop ticks (a Redis or database outage being retried ticks too)."""
        return self.supervisor.healthz(max(30.0, 3 * self.settings.claim_interval_s))

    def readyz(self) -> Probe:
        if self.supervisor.stopping.is_set():
            return Probe(False, "stopping")
        if not self._redis_ok:
            return Probe(False, "redis: unreachable or not started")
        return Probe(True, "ok")

    async def run(self) -> None:
        """Until stop(): Redis outages are waited out; anything else not retriable raises.
        With the app's http_port set, /metrics (this source's registry), /healthz and
        /readyz are served as for the Kafka consumer."""
        s = self.app.settings
        if s.http_port is not None:
            self.ops = OpsServer(
                s.http_host, s.http_port, self.metrics.registry, self.healthz, self.readyz
            )
            await self.ops.start()
        try:
            await self._retrying(self._create_groups)
            await self._retrying(self._own_pending)
            next_claim = next_gauges = 0.0
            while not self.supervisor.stopping.is_set():
                self.supervisor.tick()
                now = time.monotonic()
                if now >= next_claim:
                    await self._retrying(self.claim_idle)
                    next_claim = now + self.settings.claim_interval_s
                if now >= next_gauges:
                    await self._retrying(self.refresh_gauges)
                    next_gauges = now + self.settings.gauges_interval_s
                await self._retrying(self._read_new)
        except Abandon:
            log.info("stopping with an entry still failing; it stays pending")
        finally:
            await self._client.aclose()
            if self.ops is not None:
                await self.ops.stop()

    async def _retrying(self, step: Callable[[], Awaitable[None]]) -> None:
        backoff = Backoff(self.app.settings.backoff_base_s, self.app.settings.backoff_max_s)
        while not self.supervisor.stopping.is_set():
            try:
                await step()
                self._redis_ok = True
                return
            except RedisFailure as exc:
                self._redis_ok = False
                if not exc.retriable:
                    raise
                log.warning("redis unavailable; retrying", extra={"error": str(exc)})
                await self.supervisor.sleep(backoff.next_s())

    async def _create_groups(self) -> None:
        for stream in self._topic_of:
            try:
                await self._call(
                    lambda s=stream: self._client.xgroup_create(
                        s, self.group, id="0", mkstream=True
                    )  # type: ignore[misc]
                )
            except RedisFailure as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _own_pending(self) -> None:
        """This consumer name's entries from a previous run: delivered, never acked."""
        for stream in self._topic_of:
            reply: Any = await self._call(
                lambda s=stream: self._client.xreadgroup(  # type: ignore[misc]
                    self.group, self.settings.consumer_name, {s: "0"}, count=None
                )
            )
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    if not fields:
                        await self._lost(stream, [entry_id])
                        await self._ack(stream, entry_id)
                    else:
                        await self.process(stream, entry_id, fields, redelivered=True)

    async def claim_idle(self) -> None:
        """XAUTOCLAIM every entry idle longer than claim_idle_s, walking the cursor to 0-0."""
        idle_ms = int(self.settings.claim_idle_s * 1000)
        for stream in self._topic_of:
            cursor: bytes | str = "0-0"
            while True:
                reply: Any = await self._call(
                    lambda s=stream, c=cursor: self._client.xautoclaim(  # type: ignore[misc]
                        s,
                        self.group,
                        self.settings.consumer_name,
                        idle_ms,
                        start_id=c,
                        count=self.settings.count,
                    )
                )
                cursor, claimed = reply[0], reply[1]
                deleted = reply[2] if len(reply) > 2 else []  # Redis >= 7
                if deleted:
                    await self._lost(stream, deleted)
                for entry_id, fields in claimed:
                    if fields:
                        await self.process(stream, entry_id, fields, redelivered=True)
                if cursor in (b"0-0", "0-0") or self.supervisor.stopping.is_set():
                    break

    async def _read_new(self) -> None:
        streams = dict.fromkeys(self._topic_of, ">")
        reply: Any = await self._call(
            lambda: self._client.xreadgroup(
                self.group,
                self.settings.consumer_name,
                streams,  # type: ignore[arg-type]
                count=self.settings.count,
                block=self.settings.block_ms,
            )
        )
        for raw_stream, entries in reply or []:
            stream = raw_stream.decode() if isinstance(raw_stream, bytes) else raw_stream
            for entry_id, fields in entries:
                await self.process(stream, entry_id, fields or {}, redelivered=False)

    async def _lost(self, stream: str, ids: list[Any]) -> None:
        self.stats.lost += len(ids)
        self.metrics.lost.labels(stream).inc(len(ids))
        log.error(
            "pending entries were trimmed from the stream before they were applied: lost",
            extra={"stream": stream, "group": self.group, "ids": [_text(i) for i in ids]},
        )

    async def process(
        self, stream: str, entry_id: bytes, fields: dict[bytes, bytes], *, redelivered: bool
    ) -> None:
        """Apply the entry (or dead-letter or skip it) and then ack it; Abandon when
        stopping while it still fails transiently (it stays pending)."""
        if redelivered:
            self.stats.redelivered += 1
            self.metrics.redelivered.labels(stream).inc()
        record = entry_record(self._topic_of[stream], stream, entry_id, fields)
        outcome = await self.policy.process(record)
        if outcome is Outcome.DEAD_LETTERED:
            return  # acked with its move to the dead-letter stream
        if outcome is Outcome.APPLIED:
            await self.before_ack(stream, entry_id)
        await self._ack(stream, entry_id)

    async def before_ack(self, stream: str, entry_id: bytes) -> None:
        """Between the database commit and the XACK: a seam for the fault tests."""

    async def _ack(self, stream: str, entry_id: bytes) -> None:
        # A lost XACK only leaves the entry pending: it is claimed later and, applied
        # already, skipped by the dedup row and acked then.
        try:
            await self._call(lambda: self._client.xack(stream, self.group, entry_id))
        except RedisFailure as exc:
            log.warning("XACK failed; the entry stays pending", extra={"error": str(exc)})

    async def send(self, record: SourceRecord, error: BaseException) -> None:
        """The policy's DeadLetterSink: XADD to the dead-letter stream and XACK the entry
        in one MULTI/EXEC, retried while Redis is away (the entry is acked only once it is
        dead-lettered). Refused for good: kept in consumer_dead_letters, then acked."""
        assert isinstance(record, EntryRecord)
        stream, entry_id, fields = record.stream, record.entry_id, record.fields
        body = dead_letter_fields(
            fields, stream=stream, entry_id=entry_id, group=self.group, error=error
        )

        async def move() -> None:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.xadd(stream + self.settings.dead_letter_suffix, body)  # type: ignore[arg-type]
                pipe.xack(stream, self.group, entry_id)
                await self._call(pipe.execute)

        try:
            await self._retrying(move)
        except RedisFailure as refused:  # not retriable: it will never be taken
            row = DeadLetterRow(
                self.group,
                record.topic,
                -1,
                _text(entry_id),
                record.key,
                record.value,
                record.headers,
                error,
                refused,
            )
            await keep_in_table(
                self.app.database,
                self.supervisor,
                row,
                DeadLetterFailure.REFUSED,
                retriable=is_transient,
            )
            self.stats.dead_letters_kept += 1
            self.metrics.dead_letters_kept.labels(stream).inc()
            await self._ack(stream, entry_id)
            return
        self.stats.dead_lettered += 1
        self.metrics.dead_lettered.labels(stream).inc()
        log.error(
            "entry dead-lettered",
            extra={"stream": stream, "id": _text(entry_id), "error": first_line(error)},
        )

    async def refresh_gauges(self) -> None:
        """Pending entries, the oldest one's age and the group's lag, per stream."""
        groups_of: dict[str, Any] = {}
        for stream in self._topic_of:
            summary: Any = await self._call(lambda s=stream: self._client.xpending(s, self.group))  # type: ignore[misc]
            self.metrics.pending.labels(stream).set(summary["pending"])
            oldest = summary.get("min")
            age = time.time() - entry_millis(oldest) / 1000 if oldest else 0.0
            self.metrics.oldest_pending_age.labels(stream).set(max(age, 0.0))
            groups_of[stream] = await self._call(
                lambda s=stream: self._client.xinfo_groups(s)  # type: ignore[misc]
            )
            for info in groups_of[stream]:
                if _text(info.get("name")) == self.group and info.get("lag") is not None:
                    self.metrics.lag.labels(stream).set(info["lag"])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def run_redis_source(app: ConsumerApp, settings: RedisSourceSettings) -> RedisSource:
    """Run a source until it is stopped (tests and small services; a CLI wraps this)."""
    source = RedisSource(app, settings)
    await source.run()
    return source


__all__ = ["RedisSource", "RedisSourceSettings", "run_redis_source"]
