"""ConsumerApp: the handlers by topic and event type, the database they write to, and the
settings a Consumer runs them with."""

from __future__ import annotations

from collections.abc import Callable

from consumer_lib.database import Database, Handler
from consumer_lib.errors import ConsumerConfigError
from consumer_lib.settings import ConsumerSettings


class ConsumerApp:
    """Handlers by topic and event type, the database they write to, and the settings.

    app = ConsumerApp(settings, SqlAlchemyAsync(engine))

    @app.handler("orders", "OrderPlaced")
    async def on_order(event: ConsumedEvent, session: AsyncSession) -> None: ...
    """

    def __init__(self, settings: ConsumerSettings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self._handlers: dict[tuple[str, str | None], Handler] = {}

    def handler(self, topic: str, event_type: str | None = None) -> Callable[[Handler], Handler]:
        """Register for one event type of a topic, or (event_type None) for all of it."""

        def register(fn: Handler) -> Handler:
            if (topic, event_type) in self._handlers:
                raise ConsumerConfigError(f"a handler for {topic}/{event_type} exists already")
            self._handlers[(topic, event_type)] = fn
            return fn

        return register

    @property
    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in self._handlers})

    def find(self, topic: str, event_type: str | None) -> Handler | None:
        return self._handlers.get((topic, event_type)) or self._handlers.get((topic, None))
