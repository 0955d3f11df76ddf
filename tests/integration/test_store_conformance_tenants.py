"""Fair claims (issue 16) against every backend: each shard's batch takes turns between
its tenants (weighted, capped), per-key order holds, and the claim's other rules (block_key,
in_flight, delays, shards) are those of the plain claim. Same fixtures as
test_store_conformance.py: a fresh Postgres database or SQLite file per test."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

import pytest

from relay.store import ClaimedRow, Failure, Policy, Store, TenantTurns
from relay.store.plans import EXACT
from tests.support.db import Backend
from tests.support.stores import claim, emit, event, ids_of, keys_on_shard, settle

pytestmark = pytest.mark.integration

SHARD = 3
OTHER = 5
OWNER = "relay-1"
POLICIES: tuple[Policy, ...] = ("block_key", "skip")
FAIR = TenantTurns()


async def lease(store: Store, shard: int = SHARD) -> int:
    token = await store.lease_acquire(shard, OWNER, 30)
    assert token is not None
    return token


def in_id_order_per_key(rows: list[ClaimedRow]) -> bool:
    """Within a claim, each key's rows in id order (what the publisher relies on)."""
    by_key: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        by_key[row.key].append(row.id)
    return all(ids == sorted(ids) for ids in by_key.values())


def ids_in(rows: list[ClaimedRow]) -> list[int]:
    """The claim's ids, each shard's in id order as in any claim."""
    assert in_id_order_per_shard(rows)
    return sorted(ids_of(rows))


def in_id_order_per_shard(rows: list[ClaimedRow]) -> bool:
    by_shard: dict[int, list[int]] = defaultdict(list)
    for row in rows:
        by_shard[row.shard].append(row.id)
    return all(ids == sorted(ids) for ids in by_shard.values())


async def test_a_fair_claim_takes_turns_between_tenants(backend: Backend, store: Store) -> None:
    """A's backlog was committed first; B's rows and the untenanted ones after it. The plain
    claim gives A's oldest rows; the fair one gives every tenant its turn (the untenanted
    rows are a tenant of their own), the oldest row first within a turn."""
    a, b, n = keys_on_shard(SHARD, 3)
    flood = emit(backend, *(event(a, tenant="A") for _ in range(6)))
    mine = emit(backend, event(b, tenant="B"), event(b, tenant="B"))
    plain = emit(backend, event(n), event(n))
    for policy in POLICIES:
        assert ids_of(await claim(store, [SHARD], 6, policy)) == flood
        fair = await claim(store, [SHARD], 6, policy, turns=FAIR)
        # Two whole turns, returned in id order.
        assert ids_of(fair) == sorted(flood[:2] + mine + plain)
        # A turn cut short goes to its oldest rows.
        cut = await claim(store, [SHARD], 4, policy, turns=FAIR)
        assert ids_of(cut) == sorted([flood[0], mine[0], plain[0], flood[1]])
        # Room for everything: nothing is left out, and the tenants' rows are all there.
        everything = await claim(store, [SHARD], 100, policy, turns=FAIR)
        assert ids_in(everything) == flood + mine + plain


async def test_weights_give_rows_per_turn_and_the_cap_bounds_a_tenant(
    backend: Backend, store: Store
) -> None:
    a, b, c = keys_on_shard(SHARD, 3)
    flood = emit(backend, *(event(a, tenant="A") for _ in range(8)))
    bees = emit(backend, *(event(b, tenant="B") for _ in range(4)))
    cees = emit(backend, *(event(c, tenant="C") for _ in range(4)))
    weighted = TenantTurns(weights={"A": 3, "Z": 5})
    for policy in POLICIES:
        # Turn 0: three of A, one of B, one of C; then turn 1 begins with its oldest rows.
        rows = await claim(store, [SHARD], 5, policy, turns=weighted)
        assert ids_in(rows) == sorted(flood[:3] + bees[:1] + cees[:1])
        rows = await claim(store, [SHARD], 10, policy, turns=weighted)
        assert ids_in(rows) == sorted(flood[:6] + bees[:2] + cees[:2])
        # The cap: at most two rows of any tenant, whatever the batch's room.
        capped = await claim(store, [SHARD], 100, policy, turns=TenantTurns(max_rows=2))
        assert ids_in(capped) == sorted(flood[:2] + bees[:2] + cees[:2])
        both = TenantTurns(weights={"A": 3}, max_rows=3)
        rows = await claim(store, [SHARD], 100, policy, turns=both)
        assert ids_in(rows) == sorted(flood[:3] + bees[:3] + cees[:3])
        # A cap above the batch size is the batch size.
        rows = await claim(store, [SHARD], 2, policy, turns=TenantTurns(max_rows=50))
        assert ids_in(rows) == [flood[0], bees[0]]


async def test_a_lane_claims_only_its_own_tenants(backend: Backend, store: Store) -> None:
    """Lanes (relay/lanes.py): `only` takes the named tenants, `skip` leaves tenants out;
    '' names the untenanted rows in both. Each claim also returns each row's tenant."""
    a, b, n = keys_on_shard(SHARD, 3)
    flood = emit(backend, *(event(a, tenant="A") for _ in range(4)))
    mine = emit(backend, event(b, tenant="B"))
    plain = emit(backend, event(n))
    bulk = TenantTurns(only=frozenset({"A"}))
    quick = TenantTurns(skip=frozenset({"A"}))
    for policy in POLICIES:
        rows = await claim(store, [SHARD], 10, policy, turns=bulk)
        assert (ids_in(rows), {r.tenant for r in rows}) == (flood, {"A"})
        rows = await claim(store, [SHARD], 10, policy, turns=quick)
        assert (ids_in(rows), [r.tenant for r in rows]) == (mine + plain, ["B", None])
        rows = await claim(store, [SHARD], 10, policy, turns=TenantTurns(only=frozenset({""})))
        assert ids_in(rows) == plain
        rows = await claim(store, [SHARD], 10, policy, turns=TenantTurns(skip=frozenset({"", "B"})))
        assert ids_in(rows) == flood
        # The greatest tenant skipped, and every tenant (and one with no rows).
        rows = await claim(store, [SHARD], 10, policy, turns=TenantTurns(skip=frozenset({"B"})))
        assert ids_in(rows) == flood + plain
        everyone = TenantTurns(skip=frozenset({"", "A", "B", "Z"}))
        assert await claim(store, [SHARD], 10, policy, turns=everyone) == []
        assert await claim(store, [SHARD], 10, policy, turns=TenantTurns(only=frozenset())) == []
        plain_claim = await claim(store, [SHARD], 10, policy)
        assert [r.tenant for r in plain_claim] == ["A"] * 4 + ["B", None]


async def test_a_one_tenant_lane_claims_what_the_fair_claim_would(
    backend: Backend, store: Store
) -> None:
    """A lane claiming for one tenant runs outbox_claim_batch_tenant (no ranking): the same
    rows as the fair claim for that tenant, which is what naming a second tenant with no
    rows (Z) runs, under every rule: limit, cap, shards, delays, in_flight, block_key."""
    a, b = keys_on_shard(SHARD, 2)
    (x,) = keys_on_shard(OTHER, 1)
    ids = emit(
        backend,
        event(a, tenant="A"),
        event(b, tenant="A"),
        event(x, tenant="A"),
        event(a, tenant="B"),
        event(a, tenant="A"),
        event(b, tenant="A", deliver_after=dt.timedelta(hours=1)),
        event(x, tenant="A"),
        event(b, tenant="A"),
        event(a),
    )
    a1, b1, x1, _b_tenant, a2, _later, x2, b2, _untenanted = ids
    both = [SHARD, OTHER]

    async def same(limit: int, policy: Policy, in_flight: list[int], cap: int | None) -> list[int]:
        lone = TenantTurns(only=frozenset({"A"}), max_rows=cap)
        fair = TenantTurns(only=frozenset({"A", "Z"}), max_rows=cap)
        rows = await claim(store, both, limit, policy, in_flight, lone)
        assert {r.tenant for r in rows} <= {"A"}
        assert ids_in(rows) == ids_in(await claim(store, both, limit, policy, in_flight, fair))
        return ids_in(rows)

    for policy in POLICIES:
        assert await same(100, policy, [], None) == [a1, b1, x1, a2, x2, b2]
        assert await same(2, policy, [], None) == [a1, b1, x1, x2]
        assert await same(100, policy, [], 1) == [a1, x1]
        assert await same(100, policy, [a1, x1], None) == [b1, a2, x2, b2]
    token = await lease(store)
    await settle(store, OWNER, {SHARD: token}, [], [Failure(a1, "poison", 0.0, True)], False)
    assert await same(100, "block_key", [], None) == [b1, x1, x2, b2]
    assert await same(100, "skip", [], None) == [b1, x1, a2, x2, b2]
    # Named and skipped at once: nothing, as with the fair claim.
    contradiction = TenantTurns(only=frozenset({"A"}), skip=frozenset({"A"}))
    assert await claim(store, both, 100, "skip", turns=contradiction) == []


async def test_per_key_order_holds_while_tenants_interleave(backend: Backend, store: Store) -> None:
    """Drain a shard with small weighted, capped fair claims, settling each: every row goes
    out once, each claim in id order, and each key's rows in id order over the drain."""
    keys = keys_on_shard(SHARD, 6)
    owner = {keys[0]: "A", keys[1]: "A", keys[2]: "A", keys[3]: "B", keys[4]: "B", keys[5]: None}
    written: list[int] = []
    for round_ in range(5):
        batch = [event(k, tenant=owner[k]) for k in keys[:3] for _ in range(4)]
        if round_ % 2:
            batch += [event(k, tenant=owner[k]) for k in keys[3:]]
        written += emit(backend, *batch)
    key_of = {int(r[0]): str(r[3]) for r in backend.fetch("outbox_rows")}
    token = await lease(store)
    turns = TenantTurns(weights={"B": 2}, max_rows=4)
    published: list[int] = []
    first: list[ClaimedRow] | None = None
    while rows := await claim(store, [SHARD], 5, "block_key", turns=turns):
        first = first or rows
        assert in_id_order_per_key(rows)
        published += ids_of(rows)
        await settle(store, OWNER, {SHARD: token}, ids_of(rows), [], keep=False)
    assert sorted(published) == sorted(written)
    for key in keys:
        sequence = [i for i in published if key_of[i] == key]
        assert sequence == sorted(sequence), key
    # A's 36 rows came first, yet the first claim already served B and the untenanted key.
    assert first is not None
    assert {owner[row.key] for row in first} == {"A", "B", None}


async def test_a_fair_claim_keeps_the_plain_claim_s_rules(backend: Backend, store: Store) -> None:
    """Shards, delays, block_key (a failed row holds its key back, under its tenant's turns)
    and in_flight: as the plain claim. Without tenants, the same rows in the same order."""
    a, b, c = keys_on_shard(SHARD, 3)
    (x,) = keys_on_shard(OTHER, 1)
    ids = emit(
        backend,
        event(a, tenant="A"),
        event(b, tenant="A"),
        event(x, tenant="B"),
        event(a, tenant="A"),
        event(c, tenant="B", deliver_after=dt.timedelta(hours=1)),
        event(c, tenant="B"),
        event(x, tenant="B"),
        event(b, tenant="A"),
    )
    a1, b1, x1, a2, _c_later, c1, x2, b2 = ids
    both = [SHARD, OTHER]
    for policy in POLICIES:
        plain = await claim(store, both, 100, policy)
        fair = await claim(store, both, 100, policy, turns=FAIR)
        assert ids_in(fair) == sorted(ids_of(plain)) == sorted([a1, b1, x1, a2, c1, x2, b2])
        assert in_id_order_per_key(fair)
        assert await claim(store, [OTHER + 1], 100, policy, turns=FAIR) == []
        assert await claim(store, [], 100, policy, turns=FAIR) == []
        # in_flight rows (the previous cycle's, being settled) are left out.
        rows = await claim(store, both, 100, policy, [a1, x1], turns=FAIR)
        assert ids_in(rows) == sorted([b1, a2, c1, x2, b2])
    token = await lease(store)
    await settle(store, OWNER, {SHARD: token}, [], [Failure(a1, "poison", 0.0, True)], False)
    assert ids_in(await claim(store, [SHARD], 100, "block_key", turns=FAIR)) == [b1, c1, b2]
    assert ids_in(await claim(store, [SHARD], 100, "skip", turns=FAIR)) == [b1, a2, c1, b2]
    # Held back rows take no turn: the tenant's next claimable row does.
    rows = await claim(store, [SHARD], 2, "block_key", turns=TenantTurns(max_rows=1))
    assert ids_in(rows) == [b1, c1]


async def test_without_tenants_the_fair_claim_is_the_plain_one(
    backend: Backend, store: Store
) -> None:
    keys = keys_on_shard(SHARD, 4) + keys_on_shard(OTHER, 2)
    emit(backend, *(event(k) for k in keys * 3))
    for policy in POLICIES:
        for limit in (1, 4, 7, 100):
            plain = await claim(store, [SHARD, OTHER], limit, policy)
            fair = await claim(store, [SHARD, OTHER], limit, policy, turns=FAIR)
            assert sorted(fair) == sorted(plain)
            assert in_id_order_per_shard(fair)


async def test_backlog_by_tenant_names_the_top_tenants_and_sums_the_rest(
    backend: Backend, store: Store
) -> None:
    (k,) = keys_on_shard(SHARD, 1)
    emit(backend, *(event(k, tenant="A") for _ in range(5)))
    emit(backend, *(event(k, tenant="B") for _ in range(3)))
    emit(backend, *(event(k) for _ in range(4)))
    emit(backend, event(k, tenant="C"), event(k, tenant="D"))
    (everyone,) = await store.backlog_by_tenant(0, 16, EXACT)
    assert (everyone.tenant, everyone.other, everyone.pending) == (None, True, 14)
    top = await store.backlog_by_tenant(2, 16, EXACT)
    assert [(t.tenant, t.other, t.pending) for t in top] == [
        ("A", False, 5),
        (None, False, 4),
        (None, True, 5),
    ]
    assert all(0.0 <= t.oldest_pending_age_s < 60 for t in top)
    every = await store.backlog_by_tenant(10, 16, EXACT)
    assert [(t.tenant, t.other, t.pending) for t in every] == [
        ("A", False, 5),
        (None, False, 4),
        ("B", False, 3),
        ("C", False, 1),
        ("D", False, 1),
    ]
    # A bounded walk: the counts are of the first pending rows read, never more.
    walked = await store.backlog_by_tenant(10, 16, 6)
    assert sum(t.pending for t in walked) == 6
