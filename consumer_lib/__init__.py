"""Apply Kafka events exactly once by recording their event_id with the handler's writes.

    app = ConsumerApp(
        ConsumerSettings(bootstrap_servers=..., group_id="billing",
                         security=KafkaSecurity(protocol="SSL", ssl_cafile="/etc/kafka/ca.pem")),
        SqlAlchemyAsync(engine),
    )

    @app.handler("orders", "OrderPlaced")
    async def on_order(event: ConsumedEvent, session: AsyncSession) -> None:
        session.add(Invoice(order_id=event.payload["order_id"]))

Run it with `outbox-consumer run myservice.consumers:app`, or `await run_consumer(app)`;
inside a web application's lifespan, `async with consumer_in_background(app):`.
A database adapter of your own, or a wrapper around one, implements `Database` with the
types its methods take: `Work`, `Handler` and `DeadLetterRow`.
Installed with the `consumer` extra (`pip install 'outbox-relay[consumer]'`).
"""

from outbox_core.distribution import require

require("consumer", "consumer")

# The extra is checked before anything that needs it is imported.

from consumer_lib.app import ConsumerApp
from consumer_lib.consumer import Consumer, consumer_in_background, run_consumer
from consumer_lib.database import (
    Database,
    DeadLetterRow,
    DjangoSync,
    Handler,
    PsycopgAsync,
    SqlAlchemyAsync,
    SqlAlchemySync,
    Work,
)
from consumer_lib.errors import (
    ConsumerConfigError,
    ConsumerError,
    HandlerKindError,
    PoisonReason,
    PoisonRecord,
    TransientError,
)
from consumer_lib.event import ConsumedEvent
from consumer_lib.observer import ConsumerStats
from consumer_lib.record_formats import EVENT_ID_NAMESPACE, CloudEventAttributes
from consumer_lib.settings import ConsumerSettings, ConsumerSettingsError
from outbox_core.kafka_security import KafkaSecurity
from outbox_core.settings import SettingFault

__all__ = [
    "EVENT_ID_NAMESPACE",
    "CloudEventAttributes",
    "ConsumedEvent",
    "Consumer",
    "ConsumerApp",
    "ConsumerConfigError",
    "ConsumerError",
    "ConsumerSettings",
    "ConsumerSettingsError",
    "ConsumerStats",
    "Database",
    "DeadLetterRow",
    "DjangoSync",
    "Handler",
    "HandlerKindError",
    "KafkaSecurity",
    "PoisonReason",
    "PoisonRecord",
    "PsycopgAsync",
    "SettingFault",
    "SqlAlchemyAsync",
    "SqlAlchemySync",
    "TransientError",
    "Work",
    "consumer_in_background",
    "run_consumer",
]
