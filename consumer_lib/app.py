"""ConsumerApp: the handlers by topic and event type, the database they write to, and the
settings a Consumer runs them with."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from consumer_lib.database import Database, Handler
from consumer_lib.errors import ConsumerConfigError, HandlerKindError
from consumer_lib.settings import ConsumerSettings


@dataclass(frozen=True)
class Registration:
    fn: Handler
    batch: bool = True  # may share a transaction with the records fetched with it
    bulk: bool = False  # takes a list of events (on_batch)


class ConsumerApp:
    """Handlers by topic and event type, the database they write to, and the settings.

    app = ConsumerApp(settings, SqlAlchemyAsync(engine))

    @app.handler("orders", "OrderPlaced")
    async def on_order(event: ConsumedEvent, session: AsyncSession) -> None: ...

    @app.on_batch("orders", "OrderPaid")
    async def on_paid(events: list[ConsumedEvent], session: AsyncSession) -> None: ...
    """

    def __init__(self, settings: ConsumerSettings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self._handlers: dict[tuple[str, str | None], Registration] = {}

    def handler(
        self, topic: str, event_type: str | None = None, *, batch: bool = True
    ) -> Callable[[Handler], Handler]:
        """Register handler(event, session) for one event type of a topic, or (event_type
        None) for all of it. batch=False: each of its events gets a transaction of its own
        (for effects that must not share one with other events)."""
        return self._register(topic, event_type, batch=batch, bulk=False)

    def on_batch(self, topic: str, event_type: str | None = None) -> Callable[[Handler], Handler]:
        """Register handler(events, session) for bulk writes: it gets, in one call, the
        consecutive events of a batch that are its own and were not applied before (a list
        of one when a batch is re-applied a record at a time)."""
        return self._register(topic, event_type, batch=True, bulk=True)

    def _register(
        self, topic: str, event_type: str | None, *, batch: bool, bulk: bool
    ) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            if (topic, event_type) in self._handlers:
                raise ConsumerConfigError(f"a handler for {topic}/{event_type} exists already")
            _check_kind(fn, self.database)
            self._handlers[(topic, event_type)] = Registration(fn, batch=batch, bulk=bulk)
            return fn

        return register

    @property
    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self._handlers})

    def find(self, topic: str, event_type: str | None) -> Registration | None:
        return self._handlers.get((topic, event_type)) or self._handlers.get((topic, None))


def _check_kind(fn: Handler, database: Database) -> None:
    """A sync adapter would record an async handler's event as applied without awaiting
    it; an async adapter would block its event loop in a sync one."""
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    )
    if is_async == database.async_handlers:
        return
    name = getattr(fn, "__qualname__", None) or repr(fn)
    adapter = type(database).__name__
    if is_async:
        raise HandlerKindError(
            f"handler {name} is async but {adapter} runs sync handlers: make it a plain def"
        )
    raise HandlerKindError(
        f"handler {name} is sync but {adapter} awaits its handlers: make it an async def"
    )
