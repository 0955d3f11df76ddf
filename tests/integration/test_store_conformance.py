"""The relay's Store protocol, written once, run against every backend (real Postgres, real
SQLite file), each test on its own fresh database.

Rows are written as services write them (producer_lib in a committed transaction) and
what the store did is read back with the named queries in tests/support/sql.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from outbox_core.migrate import available
from producer_lib import Outbox
from relay.errors import StoreUnavailable
from relay.store import AppliedMigration, Failure, Lease, Policy, Settled, Store
from relay.store.plans import EXACT
from tests.support.db import Backend
from tests.support.ops import backdate, park
from tests.support.stores import (
    claim,
    emit,
    event,
    ids_of,
    keys_on_shard,
    lease_remaining,
    opened_store,
    row_states,
    settle,
    snapshot,
)

pytestmark = pytest.mark.integration

SHARD = 3
OTHER = 5
OWNER = "relay-1"
POLICIES: tuple[Policy, ...] = ("block_key", "skip")
# Expiry tests use leases, delays and replicas of TTL seconds, then move the database's
# clock columns back by PAST_TTL (Backend.rewind) rather than wait; what lives 30 s or
# more outlives that.
TTL = 5.0
PAST_TTL = 6.0


async def lease(store: Store, shard: int = SHARD, owner: str = OWNER) -> int:
    token = await store.lease_acquire(shard, owner, 30)
    assert token is not None
    return token


# ---------------------------------------------------------------------------- claim


async def test_claim_returns_pending_rows_of_one_shard_in_id_order(
    backend: Backend, store: Store
) -> None:
    a, b, c = keys_on_shard(SHARD, 3)
    (x,) = keys_on_shard(OTHER, 1)
    first = emit(backend, event(a), event(b), event(x))
    second = emit(backend, event(c), event(a), event(x), event(b))
    mine = [first[0], first[1], second[0], second[1], second[3]]

    rows = await claim(store, [SHARD], 100, "block_key")
    assert ids_of(rows) == mine
    assert [r.key for r in rows] == [a, b, c, a, b]
    assert {(r.topic, r.event_type, r.attempts) for r in rows} == {("orders", "OrderPlaced", 0)}
    assert ids_of(await claim(store, [SHARD], 3, "block_key")) == mine[:3]
    assert ids_of(await claim(store, [SHARD], 3, "skip")) == mine[:3]
    assert ids_of(await claim(store, [OTHER], 100, "block_key")) == [first[2], second[2]]
    assert await claim(store, [SHARD + 1], 100, "block_key") == []
    # A claim only reads: the rows stay until they are settled.
    assert ids_of(await claim(store, [SHARD], 100, "skip")) == mine


async def test_claim_passes_payload_and_headers_through(backend: Backend, store: Store) -> None:
    (k,) = keys_on_shard(SHARD, 1)
    raw = bytes(range(256))  # every byte value, not valid UTF-8
    headers = {"x-tenant": "acme", "x-note": 'café ☕ "quoted" \\ back'}
    blob_event = event(k, payload=raw, headers=headers, event_type="Blob")
    doc_event = event(k, payload={"b": [1, 2.5, None], "a": "é"})
    ids = emit(backend, blob_event, doc_event)
    event_ids = {int(r[0]): str(r[1]) for r in backend.fetch("outbox_rows")}

    blob, doc = await claim(store, [SHARD], 10, "block_key")
    assert (blob.id, doc.id) == tuple(ids)
    assert type(blob.payload) is bytes
    assert blob.payload == raw
    assert doc.payload == Outbox().prepare(doc_event).payload
    assert json.loads(blob.headers_json) == Outbox().prepare(blob_event).headers
    assert json.loads(blob.headers_json)["content-type"] == "application/octet-stream"
    assert json.loads(doc.headers_json) == Outbox().prepare(doc_event).headers
    assert (blob.event_id, doc.event_id) == (event_ids[ids[0]], event_ids[ids[1]])
    assert (blob.event_type, doc.event_type) == ("Blob", "OrderPlaced")
    assert abs(blob.created_at - time.time()) < 60


async def test_claim_waits_for_available_at(backend: Backend, store: Store) -> None:
    a, b, c = keys_on_shard(SHARD, 3)
    now = dt.datetime.now(dt.UTC)
    ids = emit(
        backend,
        event(a, deliver_after=dt.timedelta(seconds=TTL)),
        event(b),
        event(c, deliver_after=now + dt.timedelta(seconds=TTL)),
        event(b, deliver_after=now - dt.timedelta(minutes=1)),
    )
    for policy in POLICIES:
        assert ids_of(await claim(store, [SHARD], 10, policy)) == [ids[1], ids[3]]
    backend.rewind(PAST_TTL)
    for policy in POLICIES:
        assert ids_of(await claim(store, [SHARD], 10, policy)) == ids


async def test_one_claim_covers_many_shards_each_in_id_order_up_to_its_limit(
    backend: Backend, store: Store
) -> None:
    """The cycle's claim: the rows of every shard asked about, at most limit per shard and
    each shard's in id order; not delayed, parked or published rows, nor shards it was not
    asked about. An empty claim is the idle relay's probe."""
    a, b = keys_on_shard(SHARD, 2)
    (x,) = keys_on_shard(OTHER, 1)
    (d,) = keys_on_shard(SHARD + 1, 1)
    everywhere = [SHARD, OTHER, SHARD + 1]
    for policy in POLICIES:
        assert await claim(store, everywhere, 10, policy) == []
        assert await claim(store, [], 10, policy) == []
    s1, s2, o1, s3, o2, _ = emit(
        backend,
        event(a),
        event(b),
        event(x),
        event(a),
        event(x),
        event(d, deliver_after=dt.timedelta(seconds=TTL)),
    )
    for policy in POLICIES:
        rows = await claim(store, everywhere, 10, policy)
        assert sorted(ids_of(rows)) == sorted([s1, s2, s3, o1, o2])
        by_shard = {shard: [r.id for r in rows if r.shard == shard] for shard in (SHARD, OTHER)}
        assert by_shard == {SHARD: [s1, s2, s3], OTHER: [o1, o2]}
        limited = await claim(store, everywhere, 2, policy)
        assert sorted(ids_of(limited)) == sorted([s1, s2, o1, o2])
        assert ids_of(await claim(store, [OTHER], 10, policy)) == [o1, o2]
    token = await lease(store)
    await settle(store, OWNER, {SHARD: token}, [], [Failure(s1, "boom", 0.0, True)], False)
    # Parked: its key's later row waits under block_key; under skip it goes ahead.
    assert sorted(ids_of(await claim(store, everywhere, 10, "block_key"))) == [s2, o1, o2]
    assert sorted(ids_of(await claim(store, everywhere, 10, "skip"))) == [s2, o1, s3, o2]


async def test_block_key_holds_a_key_behind_its_failed_or_parked_row(
    backend: Backend, store: Store
) -> None:
    """block_key: a row is not claimed while an earlier unpublished row of its key is
    parked, or is backing off after a failure (attempts > 0, available_at in the future).
    Other keys are never held back.

    Chosen semantics: a row that is only delayed (deliver_after, attempts = 0) does not
    block its key; later rows of that key go out before it. A delay belongs to one event,
    not to its key's stream.
    """
    a, p, d, b = keys_on_shard(SHARD, 4)
    a1, p1, d1, b1, a2, p2, d2, b2 = emit(
        backend,
        event(a),
        event(p),
        event(d, deliver_after=dt.timedelta(seconds=TTL)),
        event(b),
        event(a),
        event(p),
        event(d),
        event(b),
    )
    token = await lease(store)
    settled = await settle(
        store,
        OWNER,
        {SHARD: token},
        [],
        [Failure(a1, "KafkaTimeoutError", TTL, park=False), Failure(p1, "poison", 0.0, park=True)],
        keep=False,
    )
    assert settled == Settled(published=0, failed=2)

    assert ids_of(await claim(store, [SHARD], 100, "block_key")) == [b1, d2, b2]
    backend.rewind(PAST_TTL)
    # The backoff is over: a1 and a2 come back, in order. The parked p1 still holds p2.
    assert ids_of(await claim(store, [SHARD], 100, "block_key")) == [a1, d1, b1, a2, d2, b2]
    assert ids_of(await claim(store, [SHARD], 3, "block_key")) == [a1, d1, b1]
    assert ids_of(await claim(store, [SHARD], 100, "skip")) == [a1, d1, b1, a2, p2, d2, b2]


async def test_skip_policy_holds_nothing_back(backend: Backend, store: Store) -> None:
    a, p = keys_on_shard(SHARD, 2)
    a1, p1, a2, p2 = emit(backend, event(a), event(p), event(a), event(p))
    token = await lease(store)
    await settle(
        store,
        OWNER,
        {SHARD: token},
        [],
        [Failure(a1, "slow", 60.0, park=False), Failure(p1, "poison", 0.0, park=True)],
        keep=False,
    )
    assert ids_of(await claim(store, [SHARD], 100, "skip")) == [a2, p2]
    assert ids_of(await claim(store, [SHARD], 100, "block_key")) == []


# ---------------------------------------------------------------------------- settle


async def test_settle_deletes_acked_rows_and_records_failures(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    (x,) = keys_on_shard(OTHER, 1)
    r1, r2, r3, r4, other = emit(backend, event(a), event(b), event(a), event(b), event(x))
    token = await lease(store)
    other_before = [row for row in snapshot(backend) if row[0] == other]

    # The database and this process share the host's clock: settle's now() lies between.
    before = time.time()
    settled = await settle(
        store,
        OWNER,
        {SHARD: token},
        [r1, r2, other],
        [
            Failure(r3, "KafkaTimeoutError: slow", 5.0, park=False),
            Failure(r4, "MessageSizeTooLargeError", 0.0, park=True),
            Failure(other, "not this shard", 1.0, park=True),
        ],
        keep=False,
    )
    after = time.time()
    # Rows of another shard are not this lease's to touch, whatever ids are passed.
    assert settled == Settled(published=2, failed=2)
    states = row_states(backend)
    assert set(states) == {r3, r4, other}
    assert [row for row in snapshot(backend) if row[0] == other] == other_before
    backing_off = states[r3]
    assert (backing_off.attempts, backing_off.status, backing_off.last_error) == (
        1,
        "pending",
        "KafkaTimeoutError: slow",
    )
    available_at = dict(backend.fetch("outbox_available_epoch"))[r3]
    # The delay counts from settle's now() (stored to the millisecond on SQLite).
    assert before + 5.0 - 0.002 <= available_at <= after + 5.0
    parked = states[r4]
    assert (parked.attempts, parked.status, parked.last_error) == (
        1,
        "parked",
        "MessageSizeTooLargeError",
    )
    assert not backing_off.published
    assert not parked.published

    # Attempts count up from what is stored; a zero delay makes the row claimable again.
    again = await settle(
        store, OWNER, {SHARD: token}, [], [Failure(r3, "again", 0.0, False)], False
    )
    assert again == Settled(published=0, failed=1)
    state = row_states(backend)[r3]
    assert (state.attempts, state.status, state.last_error) == (2, "pending", "again")
    assert state.available_in_s <= 0.1
    assert ids_of(await claim(store, [SHARD], 100, "block_key")) == [r3]


async def test_settle_keep_marks_rows_published_and_claims_skip_them(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    r1, r2, r3 = emit(backend, event(a), event(b), event(a))
    token = await lease(store)

    settled = await settle(store, OWNER, {SHARD: token}, [r1, r2], [], keep=True)
    assert settled == Settled(published=2, failed=0)
    states = row_states(backend)
    assert set(states) == {r1, r2, r3}
    assert [(states[i].published, states[i].attempts) for i in (r1, r2, r3)] == [
        (True, 0),
        (True, 0),
        (False, 0),
    ]
    for policy in POLICIES:
        assert ids_of(await claim(store, [SHARD], 100, policy)) == [r3]

    settled = await settle(store, OWNER, {SHARD: token}, [], [Failure(r3, "e", 60.0, False)], True)
    assert settled == Settled(published=0, failed=1)
    assert row_states(backend)[r3].attempts == 1
    assert await claim(store, [SHARD], 100, "block_key") == []


async def test_settle_refuses_a_wrong_token_or_owner_and_writes_nothing(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    r1, r2 = emit(backend, event(a), event(b))
    token = await lease(store)
    before = snapshot(backend)

    for shard, owner, wrong in [
        (SHARD, OWNER, token + 1),
        (SHARD, OWNER, token - 1),
        (SHARD, "relay-2", token),
        (OTHER, OWNER, token),  # no lease at all on that shard
    ]:
        for keep in (False, True):
            refused = await settle(
                store, owner, {shard: wrong}, [r1], [Failure(r2, "e", 1.0, True)], keep
            )
            assert refused == Settled(0, 0, frozenset({shard}))
    assert snapshot(backend) == before

    # The refusals were the fence, not a settle that never works.
    ok = await settle(store, OWNER, {SHARD: token}, [r1], [], keep=False)
    assert ok == Settled(published=1, failed=0)
    # A released lease fences its holder too.
    await store.lease_release(SHARD, OWNER, token)
    before = snapshot(backend)
    refused = await settle(store, OWNER, {SHARD: token}, [r2], [], keep=False)
    assert refused.lost == {SHARD}
    assert snapshot(backend) == before


@pytest.mark.parametrize("keep", [False, True])
async def test_settle_over_many_shards_is_fenced_per_shard(
    backend: Backend, store: Store, keep: bool
) -> None:
    """One settle for a whole cycle: the rows of a shard still ours are settled, those of
    a shard taken over meanwhile are left alone and the shard is reported lost."""
    (a,) = keys_on_shard(SHARD, 1)
    (x,) = keys_on_shard(OTHER, 1)
    r1, r2, o1, o2 = emit(backend, event(a), event(a), event(x), event(x))
    mine = await lease(store, SHARD)
    theirs = await lease(store, OTHER)
    await store.lease_release(OTHER, OWNER, theirs)
    assert await store.lease_acquire(OTHER, "relay-2", TTL) == theirs + 1
    settled = await settle(
        store,
        OWNER,
        {SHARD: mine, OTHER: theirs},
        [r1, o1],
        [Failure(r2, "e", 60.0, False), Failure(o2, "e", 60.0, False)],
        keep,
    )
    assert settled == Settled(1, 1, frozenset({OTHER}))
    for policy in POLICIES:
        assert ids_of(await claim(store, [OTHER], 10, policy)) == [o1, o2]
        assert ids_of(await claim(store, [SHARD], 10, policy)) == []  # r2 backs off


async def test_settle_with_the_token_of_a_taken_over_lease_is_refused(
    backend: Backend, store: Store
) -> None:
    (a,) = keys_on_shard(SHARD, 1)
    r1, r2, r3 = emit(backend, event(a), event(a), event(a))
    old = await store.lease_acquire(SHARD, "relay-old", TTL)
    assert old == 1
    backend.rewind(PAST_TTL)
    # Expired but not taken over: the token is the fence, not the clock.
    assert await settle(store, "relay-old", {SHARD: old}, [r1], [], False) == Settled(1, 0)

    new = await store.lease_acquire(SHARD, "relay-new", 30)
    assert new == old + 1
    before = snapshot(backend)
    for keep in (False, True):
        refused = await settle(
            store, "relay-old", {SHARD: old}, [r2], [Failure(r3, "late", 1.0, False)], keep
        )
        assert refused == Settled(0, 0, frozenset({SHARD}))
    assert snapshot(backend) == before
    settled = await settle(
        store, "relay-new", {SHARD: new}, [r2], [Failure(r3, "e", 1.0, False)], False
    )
    assert settled == Settled(published=1, failed=1)


# ---------------------------------------------------------------------------- leases


async def test_lease_acquire_and_release(backend: Backend, store: Store) -> None:
    assert await store.lease_list() == []
    assert await store.lease_acquire(SHARD, "relay-1", 30) == 1
    owner, token, left = lease_remaining(backend)[SHARD]
    assert (owner, token) == ("relay-1", 1)
    assert left is not None
    assert 29.0 < left <= 30.1  # lease_until = database now() + ttl
    assert await store.lease_acquire(SHARD, "relay-2", 30) is None
    assert await store.lease_list() == [Lease(SHARD, "relay-1", 1, True)]

    await store.lease_release(SHARD, "relay-2", 1)  # not the holder: ignored
    await store.lease_release(SHARD, "relay-1", 2)  # not its token: ignored
    assert await store.lease_list() == [Lease(SHARD, "relay-1", 1, True)]
    await store.lease_release(SHARD, "relay-1", 1)
    assert await store.lease_list() == [Lease(SHARD, None, 1, False)]
    assert lease_remaining(backend)[SHARD] == (None, 1, None)
    assert await store.lease_renew("relay-1", {SHARD: 1}, 30) == set()

    assert await store.lease_acquire(SHARD, "relay-2", 30) == 2
    assert await store.lease_acquire(OTHER, "relay-1", 30) == 1  # tokens count per shard
    assert await store.lease_list() == [
        Lease(SHARD, "relay-2", 2, True),
        Lease(OTHER, "relay-1", 1, True),
    ]


async def test_leases_expire_on_the_database_clock_and_move_with_a_higher_token(
    backend: Backend, store: Store
) -> None:
    assert await store.lease_acquire(SHARD, "relay-1", TTL) == 1
    assert await store.lease_acquire(OTHER, "relay-1", 30) == 1
    assert await store.lease_acquire(SHARD, "relay-2", 30) is None
    # Renew extends only what is held, by its holder, with the right token.
    assert await store.lease_renew("relay-1", {SHARD: 1, OTHER: 7}, TTL) == {SHARD}
    assert await store.lease_renew("relay-2", {SHARD: 1, OTHER: 1}, 30) == set()
    assert await store.lease_renew("relay-1", {}, 30) == set()

    backend.rewind(PAST_TTL)
    assert await store.lease_list() == [
        Lease(SHARD, "relay-1", 1, False),
        Lease(OTHER, "relay-1", 1, True),
    ]
    # An expired lease is not renewed (someone may be taking it over); a live one is.
    assert await store.lease_renew("relay-1", {SHARD: 1, OTHER: 1}, 60) == {OTHER}
    other_left = lease_remaining(backend)[OTHER][2]
    shard_left = lease_remaining(backend)[SHARD][2]
    assert other_left is not None
    assert 59.0 < other_left <= 60.1
    assert shard_left is not None
    assert shard_left < 0

    assert await store.lease_acquire(SHARD, "relay-2", 30) == 2
    assert await store.lease_list() == [
        Lease(SHARD, "relay-2", 2, True),
        Lease(OTHER, "relay-1", 1, True),
    ]
    assert await store.lease_renew("relay-1", {SHARD: 1}, 30) == set()
    assert await store.lease_renew("relay-2", {SHARD: 1}, 30) == set()
    assert await store.lease_renew("relay-2", {SHARD: 2}, 30) == {SHARD}


# ---------------------------------------------------------------------------- replicas


async def test_replicas_heartbeat_expire_and_leave(backend: Backend, store: Store) -> None:
    assert await store.replica_list_live() == []
    for owner, ttl in [("relay-b", 30.0), ("relay-a", 30.0), ("relay-c", TTL)]:
        await store.replica_heartbeat(owner, ttl)
    assert await store.replica_list_live() == ["relay-a", "relay-b", "relay-c"]
    await store.replica_remove("relay-b")
    await store.replica_remove("relay-unknown")
    assert await store.replica_list_live() == ["relay-a", "relay-c"]

    backend.rewind(PAST_TTL)
    assert await store.replica_list_live() == ["relay-a"]
    await store.replica_heartbeat("relay-c", 30.0)
    assert await store.replica_list_live() == ["relay-a", "relay-c"]


async def test_the_roster_says_which_live_replicas_hold_a_live_lease(
    backend: Backend, store: Store
) -> None:
    for owner in ("relay-b", "relay-a", "relay-c"):
        await store.replica_heartbeat(owner, 30.0)
    assert await store.lease_acquire(SHARD, "relay-b", 30.0) is not None
    assert await store.lease_acquire(SHARD + 1, "relay-c", TTL) is not None
    assert await store.replica_roster() == [
        ("relay-a", False),
        ("relay-b", True),
        ("relay-c", True),
    ]
    backend.rewind(PAST_TTL)  # relay-c's lease expired: it holds nothing live
    assert await store.replica_roster() == [
        ("relay-a", False),
        ("relay-b", True),
        ("relay-c", False),
    ]
    await store.replica_remove("relay-b")  # a lease without a live replica is no entry
    assert [name for name, _ in await store.replica_roster()] == ["relay-a", "relay-c"]


# ---------------------------------------------------------------------------- purge


async def test_purge_removes_old_published_rows_in_batches_and_old_idempotency_keys(
    backend: Backend, store: Store
) -> None:
    a, b = keys_on_shard(SHARD, 2)
    old = emit(
        backend,
        event(a, idempotency_key="old-key"),
        event(b),
        event(a),
        event(b),
        event(a),
    )
    token = await lease(store)
    await settle(store, OWNER, {SHARD: token}, old[:3], [Failure(old[3], "x", 0, True)], keep=True)
    backend.rewind(PAST_TTL)
    recent = emit(backend, event(a, idempotency_key="recent-key"), event(b))
    await settle(store, OWNER, {SHARD: token}, recent[:1], [], keep=True)

    # Retention TTL: the three rows published before the rewind are old enough.
    assert await store.purge(TTL, TTL, 2) == 2 + 1  # two rows (the limit), one old key
    assert await store.purge(TTL, TTL, 2) == 1
    assert await store.purge(TTL, TTL, 2) == 0
    # Unpublished rows (pending or parked) and recent ones are never purged.
    assert sorted(row_states(backend)) == [old[3], old[4], *recent]
    assert backend.fetch("idempotency_keys") == [("recent-key",)]

    assert await store.purge(0.0, 3600.0, 100) == 1  # retention 0: every published row
    assert sorted(row_states(backend)) == [old[3], old[4], recent[1]]


# ---------------------------------------------------------------------------- basics


async def test_backlog_counts_stop_at_their_limit_and_the_oldest_age_is_exact(
    backend: Backend, store: Store
) -> None:
    k, x = keys_on_shard(SHARD, 2)
    first = emit(backend, *(event(k) for _ in range(3)))
    backdate(backend, first[:1], 120)  # the oldest pending row
    parked = emit(backend, event(x), event(x))
    emit(backend, *(event(x) for _ in range(3)))
    park(backend, parked, "RecordTooLarge: made up")
    exact = await store.backlog(16, EXACT)
    assert (exact.pending, exact.parked) == (6, 2)
    assert exact.oldest_pending_age_s >= 120
    for limit, pending, parked_seen in ((4, 4, 2), (1, 1, 1)):
        bounded = await store.backlog(16, limit)
        assert (bounded.pending, bounded.parked) == (pending, parked_seen)
        assert bounded.oldest_pending_age_s >= 120


async def test_migrations_and_shard_count(backend: Backend, store: Store) -> None:
    applied = await store.migrations()
    assert applied == [
        AppliedMigration(m.version, m.name, m.checksum) for m in available(backend.dialect)
    ]
    assert [(m.version, m.name) for m in applied] == [
        (int(v), str(n)) for v, n in backend.fetch("migrations_applied")
    ]
    assert await store.shard_count() == 16


async def test_shard_count_is_the_database_s(empty_backend: Backend) -> None:
    empty_backend.migrate(shard_count=4)
    async with opened_store(empty_backend) as store:
        assert await store.shard_count() == 4


async def test_unmigrated_database(empty_backend: Backend) -> None:
    if empty_backend.dialect == "sqlite":
        empty_backend.connect().close()  # an empty database file
    async with opened_store(empty_backend) as store:
        assert await store.migrations() == []
        with pytest.raises(StoreUnavailable):
            await store.shard_count()


async def test_max_pending_shard(backend: Backend, store: Store) -> None:
    assert await store.max_pending_shard() == -1
    (low,) = keys_on_shard(SHARD, 1)
    (high,) = keys_on_shard(OTHER, 1)
    lo, hi = emit(backend, event(low), event(high))
    assert await store.max_pending_shard() == OTHER
    await settle(store, OWNER, {OTHER: await lease(store, OTHER)}, [hi], [], keep=False)
    assert await store.max_pending_shard() == SHARD
    await settle(store, OWNER, {SHARD: await lease(store, SHARD)}, [lo], [], keep=True)
    assert await store.max_pending_shard() == -1
