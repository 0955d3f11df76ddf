"""Which lane claims which tenant (relay/lanes.py): a tenant moves only once the lane it
leaves has settled every batch that could hold its rows, and the two lanes' claims never
share a tenant."""

from __future__ import annotations

from relay.pipeline.lanes import TenantLanes
from relay.store import ClaimedRow, TenantTurns


def rows(*spec: tuple[str | None, int, int]) -> list[ClaimedRow]:
    """(tenant, shard, count) -> that many claimed rows."""
    out: list[ClaimedRow] = []
    for tenant, shard, count in spec:
        for _ in range(count):
            n = len(out)
            out.append(ClaimedRow(n, shard, f"e{n}", "t", "k", "T", b"", "{}", 0, 0.0, tenant))
    return out


def scopes(lanes: TenantLanes) -> tuple[frozenset[str] | None, frozenset[str]]:
    bulk = lanes.turns("bulk")
    quick = lanes.turns("quick")
    assert quick is not None
    assert quick.only is None
    return (None if bulk is None else bulk.only), quick.skip


def test_a_tenant_with_a_backlog_moves_to_bulk_once_its_quick_batches_are_settled() -> None:
    lanes = TenantLanes(TenantTurns(weights={"A": 2}), bulk_rows=10, batch_size=50)
    woken: list[str] = []
    lanes.on_wake("bulk", lambda: woken.append("bulk"))
    quick = lanes.turns("quick")
    assert quick is not None
    assert quick.max_rows == 10
    assert quick.weights == {"A": 2}
    assert lanes.turns("bulk") is None  # nothing to claim: no statement at all
    lanes.claimed("quick", 3, rows(("A", 1, 10), ("B", 1, 2), (None, 2, 9)))
    # A is on its way: the quick lane skips it, the bulk lane does not have it yet.
    assert scopes(lanes) == (None, frozenset({"A"}))
    lanes.settled("quick", 2)
    assert scopes(lanes) == (None, frozenset({"A"}))
    assert woken == []
    lanes.settled("quick", 3)
    assert scopes(lanes) == (frozenset({"A"}), frozenset({"A"}))
    assert woken == ["bulk"]
    bulk = lanes.turns("bulk")
    assert bulk is not None
    assert bulk.max_rows is None
    assert bulk.weights == {"A": 2}


def test_a_drained_tenant_returns_to_quick_once_its_bulk_batches_are_settled() -> None:
    lanes = TenantLanes(TenantTurns(), bulk_rows=10, batch_size=50)
    lanes.claimed("quick", 1, rows(("A", 1, 10), ("", 2, 10)))
    lanes.settled("quick", 1)
    assert scopes(lanes) == (frozenset({"A", ""}), frozenset({"A", ""}))
    # A bulk claim: A still has ten rows in a shard, the untenanted rows had room in
    # theirs and came back short: gone from the bulk lane at once, but the quick lane
    # waits for the bulk batches that may hold them.
    lanes.claimed("bulk", 7, rows(("A", 1, 10), ("", 2, 3)))
    assert scopes(lanes) == (frozenset({"A"}), frozenset({"A", ""}))
    lanes.settled("bulk", 6)
    assert scopes(lanes) == (frozenset({"A"}), frozenset({"A", ""}))
    lanes.settled("bulk", 7)
    assert scopes(lanes) == (frozenset({"A"}), frozenset({"A"}))
    # A full shard keeps its tenants, however few rows each got; an empty claim drains
    # the lane.
    lanes.claimed("bulk", 8, rows(("A", 4, 2), ("Z", 4, 48)))
    assert scopes(lanes)[0] == frozenset({"A"})
    lanes.claimed("bulk", 9, [])
    lanes.settled("bulk", 9)
    assert scopes(lanes) == (None, frozenset())


def test_the_threshold_is_the_lowest_of_bulk_rows_the_cap_and_the_batch() -> None:
    assert TenantLanes(TenantTurns(max_rows=4), bulk_rows=10, batch_size=50).threshold == 4
    assert TenantLanes(TenantTurns(), bulk_rows=100, batch_size=50).threshold == 50
    lanes = TenantLanes(TenantTurns(max_rows=4), bulk_rows=10, batch_size=50)
    lanes.claimed("quick", 1, rows(("A", 0, 4)))
    lanes.settled("quick", 1)
    bulk = lanes.turns("bulk")
    assert bulk is not None
    assert bulk.only == frozenset({"A"})
    assert bulk.max_rows == 4


def test_untenanted_rows_count_as_one_tenant_whether_none_or_empty() -> None:
    """A row's tenant is None or '' by how it was written: both are the untenanted rows,
    and together they reach the threshold."""
    lanes = TenantLanes(TenantTurns(), bulk_rows=10, batch_size=50)
    lanes.claimed("quick", 1, rows((None, 2, 5), ("", 2, 5), ("B", 3, 9)))
    lanes.settled("quick", 1)
    assert scopes(lanes) == (frozenset({""}), frozenset({""}))
    # Back in the bulk lane, five of each still make a backlog in shard 2.
    lanes.claimed("bulk", 2, rows((None, 2, 5), ("", 2, 5)))
    assert scopes(lanes)[0] == frozenset({""})
