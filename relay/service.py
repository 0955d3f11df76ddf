"""The relay service: start-up checks, then named, supervised loops until stop().

Loops (each in its own module, with its settings and one round: a run_once, or the
pipeline's Step.run):
- `leases` (control/leases.py): heartbeat, renew, rebalance; adds and removes the
  pipeline's shards.
- `lane` (pipeline/loop.py): cycles of the step (pipeline/step.py) that claim for every
  held shard at once, publish, settle, paced by ProbeSettings; with fair turns,
  `lane-quick` and `lane-bulk`, two lanes over the same shards (pipeline/lanes.py).
- `purge` (control/purge.py): retention of published rows and old idempotency keys.
- `gauges` (control/gauges.py): the backlog gauges, so a scrape never queries the database.
- `claim_floors` (control/floors.py, Postgres): where each shard's claim may start, so an
  old snapshot does not slow claims down.
- `horizon` (control/horizon.py, Postgres): what holds vacuum back, as gauges and warnings.
- `notify` (control/notify.py): optional LISTEN connection on Postgres for wake-up hints.

Shutdown has one recipe (`_shutdown`): stop claiming, let in-flight batches finish
within shutdown_grace_s, release leases, leave the membership, close the transport and
the database.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from outbox_core.kafka_security import KafkaSecurity
from outbox_core.migrate import available
from outbox_core.ops_http import OpsServer, Probe
from outbox_core.supervisor import Supervisor
from relay.config import RelaySettings
from relay.control.floors import ClaimFloors
from relay.control.gauges import Gauges
from relay.control.horizon import Horizon
from relay.control.leases import LeaseKeeper
from relay.control.notify import listen
from relay.control.purge import Purger
from relay.database import make_store
from relay.errors import PublishingStopped, RelayError, StartupRefused, StoreUnavailable
from relay.ops.observer import RelayObserver, RelayStats
from relay.pipeline.loop import Pipeline, PublisherKeeper
from relay.pipeline.step import BatchOutcome
from relay.store import Store
from relay.transport.errors import PublishFailed, TransportUnavailable
from relay.transport.kafka import KafkaPublisher
from relay.transport.protocol import Publisher, ShardPublisher
from relay.transport.redis_streams import RedisStreamPublisher
from relay.transport.transactions import ShardTransactions, TransactionEvents

log = logging.getLogger("relay")


class RelayService:
    def __init__(
        self,
        settings: RelaySettings,
        *,
        store: Store | None = None,
        publisher: Publisher | None = None,
        on_batch: Callable[[BatchOutcome], None] | None = None,
    ) -> None:
        self.settings = settings
        s = settings
        rules = s.batch_rules()
        self.store = store or make_store(s.database, lanes=rules.lanes, replica=s.leases.replica_id)
        self.supervisor = Supervisor(log)
        self.observer = RelayObserver(s.transport)
        self.producer = PublisherKeeper(
            publisher or make_publisher(s, self.observer),
            supervisor=self.supervisor,
            observer=self.observer,
            transport=s.transport,
        )
        # Lanes (fair turns): the bulk lane sends through a producer of its own.
        self.bulk_producer = (
            PublisherKeeper(
                make_publisher(s),
                supervisor=self.supervisor,
                observer=self.observer,
                transport=s.transport,
            )
            # With kafka_transactions both lanes share the producer of each shard: a
            # second producer under the shard's transactional id would fence the first.
            if publisher is None and rules.lanes > 1 and not s.kafka.transactions
            else None
        )
        self.pipeline = Pipeline(
            s.probe,
            rules,
            store=self.store,
            publisher=self.producer,
            observer=self.observer,
            supervisor=self.supervisor,
            on_batch=on_batch,
            bulk_publisher=self.bulk_producer,
            on_stopped=self._publishing_stopped,
        )
        self.failure: PublishingStopped | None = None
        store, sup = self.store, self.supervisor
        self.leases = LeaseKeeper(
            s.leases,
            shard_count=s.shard_count or 0,  # the database's, read at start-up
            store=store,
            pipeline=self.pipeline,
            observer=self.observer,
            supervisor=sup,
        )

        def standby() -> bool:
            return self.leases.standing_by

        self.purger = Purger(s.purge, store=store, supervisor=sup, standing_by=standby)
        self.gauges = Gauges(
            s.gauges,
            shard_count=s.shard_count or 0,
            store=store,
            observer=self.observer,
            supervisor=sup,
            standing_by=standby,
        )
        self.floors = ClaimFloors(
            s.claim_floors,
            shard_count=s.shard_count or 0,
            store=store,
            supervisor=sup,
            standing_by=standby,
        )
        self.horizon = Horizon(
            s.horizon, store=store, observer=self.observer, supervisor=sup, standing_by=standby
        )
        self.ops: OpsServer | None = None
        self.observer.metrics.ready.set_function(lambda: float(self.readyz().ok))

    @property
    def stats(self) -> RelayStats:
        return self.observer.stats

    @property
    def _producers(self) -> list[PublisherKeeper]:
        return [self.producer, *filter(None, [self.bulk_producer])]

    @property
    def publisher(self) -> Publisher:
        return self.producer.publisher

    def stop(self) -> None:
        """Ask for a graceful stop (SIGTERM, SIGINT); run() returns when it is done."""
        if not self.supervisor.stopping.is_set():
            log.info("stopping: no new claims; draining in-flight batches")
        self.supervisor.stop()

    def _publishing_stopped(self, exc: PublishingStopped) -> None:
        """A lane cannot publish any more: shut down (releasing the leases, so another
        replica takes the shards at once) and let run() raise it."""
        if self.failure is None:
            self.failure = exc
        self.supervisor.stop()

    async def run(self) -> None:
        """Start-up checks, then work until stop(); raises StartupRefused before touching
        anything, PublishingStopped after a shutdown because the producer cannot be started
        again."""
        s, sup = self.settings, self.supervisor
        await self.store.open()
        try:
            shard_count = await check_database(self.store, s.shard_count)
            self.leases.shard_count = self.gauges.shard_count = shard_count
            self.floors.shard_count = shard_count
            if s.http.enabled:
                self.ops = OpsServer(
                    s.http.host,
                    s.http.port,
                    self.observer.metrics.registry,
                    self.healthz,
                    self.readyz,
                )
                await self.ops.start()
            # The backlog gauges matter most while Kafka is away, start-up included.
            sup.spawn("gauges", self.gauges.run)
            with contextlib.suppress(TransportUnavailable, PublishFailed, StoreUnavailable):
                for keeper in self._producers:
                    await keeper.start()  # raises only once stopping
            if sup.stopping.is_set():
                return
            log.info(
                "relay started",
                extra={
                    "replica": s.leases.replica_id,
                    "shards": shard_count,
                    "db": self.store.dialect,
                },
            )
            sup.spawn("leases", self.leases.run)
            for lane in self.pipeline.lanes:
                sup.spawn(lane.name, lane.run)
            sup.spawn("purge", self.purger.run)
            if self.store.dialect == "postgres":
                sup.spawn("claim_floors", self.floors.run)
                sup.spawn("horizon", self.horizon.run)
            if s.notify.listen_notify and self.store.dialect == "postgres":
                self._listen()
            await sup.stopping.wait()
        finally:
            await self._shutdown()
        if self.failure is not None:
            raise self.failure

    def _listen(self) -> None:
        s, sup = self.settings, self.supervisor
        if s.database.database_pooler == "transaction":
            # A transaction pooler hands the LISTEN's server connection to other clients
            # once its transaction ends: notifications would be lost or go to them.
            log.warning(
                "listen_notify is off behind a transaction pooler: the relay polls "
                "(probe_interval_s) without wake-up hints",
                extra={"database_pooler": s.database.database_pooler},
            )
            return
        url = s.database.url.url
        kwargs = s.database.session({}, timeouts=False).connect_kwargs(url)
        sup.spawn(
            "notify",
            lambda: listen(
                url, s.notify, supervisor=sup, wake=self.pipeline.wake, connect_kwargs=kwargs
            ),
        )

    # ------------------------------------------------------------------ health

    def healthz(self) -> Probe:
        """Alive: the loops tick (lease rounds, batches, retries) at least every
        max(3 heartbeats, 30s), and the publish cycle makes progress: it settled rows, or
        found none due, within healthz_stall_s."""
        # Retry waits reach the retry backoff's cap plus the attempt itself: three of them
        # (30 s) is no false alarm.
        retry_cap_s = self.supervisor.retry_backoff.max_s
        limit = max(3 * self.settings.leases.heartbeat_interval_s, 3 * retry_cap_s)
        ticking = self.supervisor.healthz(limit)
        publisher = self.publisher
        if ticking.ok and isinstance(publisher, ShardPublisher) and publisher.stuck:
            return Probe(
                False,
                "kafka transactions that could not be ended (shards "
                f"{sorted(publisher.stuck)}): read_committed consumers wait behind them",
            )
        stall_s = self.settings.healthz_stall_s
        stalled = self.observer.stalled(stall_s) if ticking.ok and stall_s else None
        return ticking if stalled is None else Probe(False, stalled)

    def readyz(self) -> Probe:
        """Ready: database and the transport (Kafka or Redis) reachable, leases held or being
        waited for."""
        st = self.stats
        problems = []
        since = time.monotonic() - st.last_heartbeat_ok
        if not st.last_heartbeat_ok or since > self.settings.leases.lease_ttl_s:
            problems.append("database: no successful lease round recently")
        if not st.transport_ok:
            problems.append(f"{self.settings.transport}: unreachable or not started")
        if self.supervisor.stopping.is_set():
            problems.append("stopping")
        if problems:
            return Probe(False, "; ".join(problems))
        return Probe(True, f"ok: {len(self.pipeline.held)} shard(s) held")

    # ------------------------------------------------------------------ shutdown

    async def _shutdown(self) -> None:
        s = self.settings
        self.supervisor.stop()
        held = await self.pipeline.drain(s.shutdown_grace_s)
        await self.supervisor.cancel_all()
        owner = s.leases.replica_id
        for shard, token in held.items():
            with contextlib.suppress(RelayError):
                await self.store.lease_release(shard, owner, token)
        with contextlib.suppress(RelayError):
            await self.store.replica_remove(owner)
        for keeper in self._producers:
            await keeper.stop()
        await self.store.close()
        if self.ops is not None:
            await self.ops.stop()
        log.info(
            "relay stopped", extra={"published": self.stats.published, "parked": self.stats.parked}
        )


def make_publisher(settings: RelaySettings, events: TransactionEvents | None = None) -> Publisher:
    """The configured transport's publisher (events: what Kafka transactions report)."""
    if settings.transport == "redis":
        return RedisStreamPublisher(settings.redis, settings.redis_stream)
    if settings.kafka.transactions:
        return ShardTransactions(
            settings.kafka, _security(settings), settings.leases.replica_id, events
        )
    return KafkaPublisher(settings.kafka, _security(settings))


def _security(settings: RelaySettings) -> KafkaSecurity:
    return settings.kafka_security.resolve()


# ---------------------------------------------------------------------- start-up checks


async def check_database(store: Store, shard_count: int | None) -> int:
    """Refuse to run (exit code 2) on a database this relay must not touch; returns the
    shard_count to run with: the database's, which a configured one must equal."""
    applied = await store.migrations()
    known = {m.version: m for m in available(store.dialect)}
    if not applied:
        raise StartupRefused(
            "the database has no outbox schema, or one no migration recorded (made by "
            "Alembic): run `outbox-relay migrate` first (it adopts tables that match)"
        )
    for mig in applied:
        mine = known.get(mig.version)
        if mine is None:
            raise StartupRefused(
                f"the database schema is at migration {mig.version:04d}_{mig.name}, newer than "
                f"this relay knows ({max(known):04d}): upgrade the relay"
            )
        if mine.checksum != mig.checksum:
            raise StartupRefused(
                f"migration {mig.version:04d}_{mig.name} in the database differs from this "
                "relay's copy: the schema is not the one this relay was built for"
            )
    missing = sorted(set(known) - {m.version for m in applied})
    if missing:
        raise StartupRefused(
            f"the database lacks migrations {', '.join(f'{v:04d}' for v in missing)}: "
            "run `outbox-relay migrate`"
        )
    recorded = await store.shard_count()
    if shard_count is not None and recorded != shard_count:
        raise StartupRefused(
            f"shard_count mismatch: the relay is configured with {shard_count}, the "
            f"database records {recorded}: leave OUTBOX_SHARD_COUNT unset to use the "
            "database's (change it with `outbox-relay migrate --shard-count`)"
        )
    highest = await store.max_pending_shard()
    if highest >= recorded:
        raise StartupRefused(f"pending events carry shard {highest}, outside 0..{recorded - 1}")
    return recorded
