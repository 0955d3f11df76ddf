"""POST /orders writes an order and its OrderPlaced event in one transaction; the consumer,
running in the lifespan beside the API, books a shipment for each order exactly once.

    DATABASE_URL=postgresql+asyncpg://... KAFKA_BOOTSTRAP_SERVERS=... \\
        uvicorn examples.fastapi_orders.app:app

The outbox tables come from `outbox-relay migrate`; the relay runs beside the service.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from consumer_lib import Consumer, consumer_in_background
from examples.fastapi_orders.config import Config
from examples.fastapi_orders.consumers import build_consumers
from examples.fastapi_orders.models import Base, Order, Shipment
from producer_lib import Outbox


class OrderIn(BaseModel):
    id: uuid.UUID
    customer: str = Field(min_length=1, max_length=200)
    total_cents: int = Field(gt=0, le=100_000_000)


class OrderOut(BaseModel):
    id: uuid.UUID
    customer: str
    total_cents: int
    event_id: uuid.UUID | None = None
    shipped: bool = False


outbox = Outbox()


@contextlib.asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    config = Config.from_env()
    engine = create_async_engine(config.database_url, pool_size=5)
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    api.state.config = config
    api.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
    # The server owns SIGTERM/SIGINT: the consumer installs no handlers of its own and is
    # stopped (its in-flight records finished) when the lifespan ends.
    async with consumer_in_background(build_consumers(config, engine)) as consumer:
        api.state.consumer = consumer
        yield
    await engine.dispose()


app = FastAPI(lifespan=lifespan)


async def session(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.sessions() as opened:
        yield opened


Session = Annotated[AsyncSession, Depends(session)]


@app.post("/orders", status_code=201)
async def place_order(order: OrderIn, db: Session, request: Request) -> OrderOut:
    config: Config = request.app.state.config
    try:
        async with db.begin():
            db.add(Order(id=order.id, customer=order.customer, total_cents=order.total_cents))
            event_id = await outbox.emit_async(
                db,
                topic=config.orders_topic,
                key=str(order.id),
                event_type="OrderPlaced",
                payload={"order_id": str(order.id), "total_cents": order.total_cents},
            )
            # The order's INSERT is flushed at commit, after the event's: a duplicate order
            # fails there and takes the event back with it.
    except IntegrityError:
        raise HTTPException(409, f"order {order.id} exists") from None
    return OrderOut(**order.model_dump(), event_id=event_id)


@app.get("/orders/{order_id}")
async def get_order(order_id: uuid.UUID, db: Session) -> OrderOut:
    found = await db.get(Order, order_id)
    if found is None:
        raise HTTPException(404, "no such order")
    shipped = await db.scalar(select(Shipment.id).where(Shipment.order_id == order_id).limit(1))
    return OrderOut(
        id=found.id,
        customer=found.customer,
        total_cents=found.total_cents,
        shipped=shipped is not None,
    )


@app.get("/healthz")
async def healthz(request: Request, response: Response) -> dict[str, str | bool]:
    consumer: Consumer = request.app.state.consumer
    probe = consumer.readyz()
    if not probe.ok:
        response.status_code = 503
    return {"ok": probe.ok, "consumer": probe.detail}
