"""The apply policy: what becomes of one record.

Decode it; in one database transaction record (group, event_id) and run the handler (a
duplicate skips the handler). Transient failures (the database or a dependency briefly
away) are retried with backoff and without limit; the handler's own failures count, and
after max_attempts the record is dead-lettered. A record that cannot be decoded, has no
event_id or no handler is dead-lettered or skipped as the settings say. Either way it is
then settled; only stopping while it still fails leaves it (Abandon) for the next run.
"""

from __future__ import annotations

import logging
import time

from aiokafka import ConsumerRecord

from consumer_lib.app import ConsumerApp
from consumer_lib.database import Handler
from consumer_lib.dead_letters import DeadLetters
from consumer_lib.errors import PoisonRecord, is_transient
from consumer_lib.event import ConsumedEvent, decode
from consumer_lib.observer import ConsumerObserver
from consumer_lib.tracing import process_span
from outbox_core.driver_errors import first_line
from outbox_core.supervisor import Supervisor

log = logging.getLogger("consumer_lib")


class Abandon(Exception):
    """Stopping while a record is still failing: leave it for the next run."""


class ApplyPolicy:
    def __init__(
        self,
        app: ConsumerApp,
        *,
        supervisor: Supervisor,
        observer: ConsumerObserver,
        dead_letters: DeadLetters,
    ) -> None:
        self.app = app
        self.settings = app.settings
        self._sup = supervisor
        self._observer = observer
        self._dead_letters = dead_letters

    async def process(self, record: ConsumerRecord) -> None:
        """Apply the record, or settle it otherwise (skipped, dead-lettered).

        Raises Abandon when the consumer stops while the record is still failing."""
        s = self.settings
        try:
            event = decode(record)
        except PoisonRecord as exc:
            await self._dead_letters.send(record, exc)
            return
        if event.event_id is None and s.missing_event_id != "process":
            if s.missing_event_id == "dead_letter":
                await self._dead_letters.send(record, PoisonRecord("record has no event_id header"))
            else:
                self._observer.skipped()
            return
        handler = self.app.find(event.topic, event.event_type)
        if handler is None:
            if s.unhandled == "dead_letter":
                await self._dead_letters.send(
                    record, PoisonRecord(f"no handler for {event.event_type!r}")
                )
            else:
                self._observer.skipped()
            return
        await self._apply(record, event, handler)

    async def _apply(self, record: ConsumerRecord, event: ConsumedEvent, handler: Handler) -> None:
        s = self.settings
        failures = 0
        delay = s.backoff_base_s
        while True:
            started = time.perf_counter()
            try:
                applied = await self._attempt(event, handler)
            except Exception as exc:
                if is_transient(exc):
                    self._observer.transient_failure()
                    log.warning(
                        "transient failure; retrying the record",
                        extra={
                            "topic": record.topic,
                            "offset": record.offset,
                            "error": first_line(exc),
                        },
                    )
                else:
                    failures += 1
                    self._observer.handler_failure()
                    if failures >= s.max_attempts:
                        await self._dead_letters.send(record, exc)
                        return
                    log.warning(
                        "handler failed; retrying",
                        extra={
                            "offset": record.offset,
                            "attempt": failures,
                            "error": first_line(exc),
                        },
                    )
                if self._sup.stopping.is_set():
                    raise Abandon from exc
                await self._sup.sleep(delay)
                delay = min(delay * 2, s.backoff_max_s)
                continue
            elapsed = time.perf_counter() - started
            if applied:
                self._observer.applied(record.topic, elapsed)
            else:
                self._observer.duplicate(record.topic, elapsed)
            return

    async def _attempt(self, event: ConsumedEvent, handler: Handler) -> bool:
        """One transaction, in its own span; False: the group had applied the event."""
        group = self.settings.group_id
        event_id = str(event.event_id) if event.event_id is not None else None
        with process_span(event, group) as span:
            applied = await self.app.database.apply(group, event_id, handler, event)
            if span is not None and not applied:
                span.set_attribute("outbox.duplicate", True)
        return applied
