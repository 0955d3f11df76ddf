"""The cycle's claim on Postgres walks the partial index of unpublished rows, one short
index scan per shard, even when the table's statistics still describe a backlog that was
all unpublished (taken after an outage or a bulk load, before retention=keep marked most
of it published). With the default random_page_cost the planner then prefers walking the
primary key in id order and filtering every shard's rows out of every row; the relay's
work connections set random_page_cost (relay/database.py) so that it does not."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from outbox_core.queries import query
from relay.database import CONTROL_SERVER_OPTIONS, WORK_SERVER_OPTIONS
from relay.ops import admin
from relay.store.protocol import UNBOUNDED_BYTES
from tests.support.db import DIALECT_SQL, Backend, postgres_backend

pytestmark = pytest.mark.integration

ROWS = 60_000


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


def explain(url: str, options: str, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, options=options) as conn:
        (doc,) = conn.execute(
            # EXPLAIN of the relay's own statement, not a copy of it.
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("postgres", name),
            params,
        ).fetchone() or (None,)
    parsed = doc if isinstance(doc, list) else json.loads(doc)
    return plan_nodes(parsed[0]["Plan"])


def claim_plan(
    url: str,
    options: str,
    in_flight: list[int],
    name: str = "outbox_claim_batch",
    **extra: Any,
) -> list[dict[str, Any]]:
    params = {
        "shards": list(range(16)),
        "floors": [0] * 16,
        "limit": 500,
        "in_flight": in_flight,
        "shard_bytes": UNBOUNDED_BYTES,
        "held_keys": [],
        **extra,
    }
    return explain(url, options, name, params)


def index_scans(nodes: list[dict[str, Any]]) -> set[str]:
    return {
        n["Index Name"]
        for n in nodes
        if n["Node Type"] in ("Index Scan", "Index Only Scan")
        and n.get("Relation Name") == "outbox_events"
        and "Index Name" in n
    }


def half_published_with_stale_statistics(pg_url: str) -> tuple[Backend, int]:
    """ROWS rows, the first half marked published after the statistics were taken."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    backend.execute("outbox_fill", {"rows": ROWS})
    backend.execute("outbox_analyze")  # statistics: every row unpublished
    below = int(backend.fetch("outbox_id_quantile", {"q": 0.5})[0][0])
    backend.execute("outbox_mark_published_below", {"below": below})
    return backend, below


def test_the_claim_walks_the_unpublished_index_whatever_the_statistics(pg_url: str) -> None:
    backend, below = half_published_with_stale_statistics(pg_url)

    # The previous cycle's rows, acked and being settled: the claim walks past them.
    in_flight = list(range(below, below + 16 * 500))
    nodes = claim_plan(backend.target, WORK_SERVER_OPTIONS, in_flight)
    scans = index_scans(nodes)
    assert "outbox_events_unpublished_idx" in scans, nodes
    assert "outbox_events_pkey" not in scans, nodes
    # One short walk per shard: past its in-flight rows (about 500), never over the
    # published ones (about 1,900 a shard).
    assert all(n.get("Rows Removed by Filter", 0) < 1000 for n in nodes), nodes
    (top,) = [n for n in nodes if n["Node Type"] == "Nested Loop"][:1]
    assert top["Actual Rows"] == 16 * 500


def test_the_backlog_gauge_finds_each_shard_s_oldest_row_through_the_index(pg_url: str) -> None:
    """The gauges and `status` run on the control connections: the oldest pending row of
    a shard is the first entry of the unpublished index, not a walk of the primary key
    past every published row."""
    backend, _ = half_published_with_stale_statistics(pg_url)
    limit = 5_000  # of the 30,000 unpublished rows
    params = {
        "shard_count": 16,
        "shards": list(range(16)),
        "floors": [0] * 16,
        "count_limit": limit,
    }
    nodes = explain(backend.target, CONTROL_SERVER_OPTIONS, "outbox_backlog", params)
    walks = [n for n in nodes if "Index Name" in n]
    assert "outbox_events_pkey" not in {
        n["Index Name"] for n in walks if n.get("Rows Removed by Filter")
    }
    # No index walk filters the published ones (about 1,900 a shard) out row by row.
    assert all(n.get("Rows Removed by Filter", 0) < 1000 for n in walks), nodes
    # The pending count stops at its limit: an ordered walk of the unpublished index gives
    # about that many entries (EXPLAIN rounds each loop's rows), plus the oldest row's
    # probes, two a shard; a bitmap scan would read whole shards (11,250 here).
    read = sum(
        n["Actual Rows"] * n["Actual Loops"]
        for n in walks
        if n["Index Name"] == "outbox_events_unpublished_idx"
    )
    assert read <= limit + 64, nodes
    # Parked rows are counted through the index of failed rows, not a walk of the backlog.
    assert "outbox_events_blocking_idx" in {n["Index Name"] for n in walks}, nodes


def test_the_status_command_plans_as_the_relay_does(pg_url: str) -> None:
    """`outbox-relay status` runs the same backlog query on a connection of its own."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    with admin._Session(backend.url) as session:
        (row,) = session.conn.execute(
            DIALECT_SQL["postgres"]["server_setting"], {"name": "random_page_cost"}
        ).fetchall()
    assert float(row[0]) == 1.1


EVERY_TENANT: dict[str, Any] = {"only": None, "skip": []}


def tenant_index_rows(nodes: list[dict[str, Any]]) -> int:
    """Entries of outbox_events_tenant_idx read, over every loop of every walk of it."""
    return sum(
        n["Actual Rows"] * n["Actual Loops"]
        for n in nodes
        if n.get("Index Name") == "outbox_events_tenant_idx" and "Limit" not in n["Node Type"]
    )


@pytest.mark.parametrize("name", ["outbox_claim_batch_fair", "outbox_claim_batch_fair_skip"])
def test_the_fair_claim_walks_the_tenant_index(pg_url: str, name: str) -> None:
    """fair_tenants: a shard's tenants are found by skipping through
    outbox_events_tenant_idx (one probe per tenant) and each tenant's rows are walked in
    id order through it, past the in-flight and published rows, with the same stale
    statistics as above; the chosen rows are then read by id. Never a walk of the primary
    key, never a sequential scan."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    backend.execute("outbox_fill_tenants", {"rows": ROWS})
    backend.execute("outbox_analyze")
    below = backend.fetch("outbox_id_quantile", {"q": 0.5})[0][0]
    backend.execute("outbox_mark_published_below", {"below": below})

    in_flight = list(range(below, below + 16 * 500))
    turns = {"per_tenant": 500, "weight_tenants": ["B"], "weights": [2], **EVERY_TENANT}
    nodes = claim_plan(backend.target, WORK_SERVER_OPTIONS, in_flight, name, **turns)
    assert "outbox_events_tenant_idx" in index_scans(nodes), nodes
    # The primary key only reads the chosen rows, once, by their ids; it is never walked.
    by_key = [n for n in nodes if n.get("Index Name") == "outbox_events_pkey"]
    assert [(n["Actual Loops"], n["Actual Rows"]) for n in by_key] == [(1, 16 * 500)], nodes
    assert "ANY" in by_key[0]["Index Cond"], nodes
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], nodes
    assert all(n.get("Rows Removed by Filter", 0) < 1000 for n in nodes), nodes
    # The skip scan: a handful of probes per shard (A, B, no tenant, the end), not a walk
    # over A's rows.
    assert tenant_index_rows(nodes) < 16 * (500 + 2 * 4) + 64
    assert nodes[0]["Actual Rows"] == 16 * 500


def test_a_drained_tenant_s_entries_are_passed_over_without_reading_its_rows(
    pg_url: str,
) -> None:
    """At the end of a tenant's drain every entry of it in outbox_events_tenant_idx points
    at a row just moved out, until vacuum. The probe that finds a shard's next tenant
    passes over them to reach the tenants below; those at or below the shard's claim
    floor are passed over on the entry, without a visit to the table for each."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    backend.execute("outbox_fill_tenants", {"rows": ROWS})
    backend.execute("outbox_analyze")
    backend.execute("outbox_autovacuum_off")
    backend.execute("outbox_tenant_drained", {"tenant": "A"})
    turns = {"per_tenant": 500, "weight_tenants": [], "weights": [], **EVERY_TENANT}
    # A's ids are 1..ROWS: every row at or below ROWS is gone, in every shard.
    nodes = claim_plan(
        backend.target,
        WORK_SERVER_OPTIONS,
        [],
        "outbox_claim_batch_fair",
        floors=[ROWS] * 16,
        **turns,
    )
    assert nodes[0]["Actual Rows"] == 64  # B's and the untenanted rows
    # The index's pages and the 64 rows' pages; a visit to every one of A's rows read
    # about ROWS pages (one buffer per row fetched).
    blocks = nodes[0]["Shared Hit Blocks"] + nodes[0]["Shared Read Blocks"]
    assert blocks < ROWS // 20, nodes[0]


def test_the_quick_lane_never_walks_the_entries_of_a_tenant_it_skips(pg_url: str) -> None:
    """The end of a drain in the bulk lane: A's entries above the claim floor (which lags
    the settles) point at rows just moved out, and a snapshot older than those settles
    keeps any scan from marking them passed. The quick lane skips A: its probes stop at
    the end of A's entries and start again below them, never visiting A's rows."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    backend.execute("outbox_fill_tenants", {"rows": ROWS})
    backend.execute("outbox_analyze")
    backend.execute("outbox_autovacuum_off")
    with psycopg.connect(backend.target) as old:
        old.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT count(*) FROM outbox_settings")  # the snapshot, held
        backend.execute("outbox_tenant_drained", {"tenant": "A"})
        turns = {"per_tenant": 500, "weight_tenants": [], "weights": [], "only": None}
        nodes = claim_plan(
            backend.target, WORK_SERVER_OPTIONS, [], "outbox_claim_batch_fair", skip=["A"], **turns
        )
    assert nodes[0]["Actual Rows"] == 64  # B's and the untenanted rows
    # A visit to each of A's rows read about ROWS pages.
    blocks = nodes[0]["Shared Hit Blocks"] + nodes[0]["Shared Read Blocks"]
    assert blocks < ROWS // 20, nodes[0]
    # The probes read a few index pages each: 175 in all here, 508 when they walked
    # through A's entries without leaving the index (a bound the walk did not stop at).
    probes = [
        n
        for n in nodes
        if n.get("Index Name") == "outbox_events_tenant_idx" and n["Scan Direction"] == "Backward"
    ]
    assert sum(n["Shared Hit Blocks"] + n["Shared Read Blocks"] for n in probes) < 16 * 16, probes


@pytest.mark.parametrize(
    ("lane", "rows"), [({"only": None, "skip": ["A"]}, 4), ({"only": ["A"], "skip": []}, 500)]
)
def test_a_lane_s_claim_never_walks_the_other_lane_s_tenants(
    pg_url: str, lane: dict[str, Any], rows: int
) -> None:
    """Lanes (relay/lanes.py): the quick lane skips the bulk tenant A and the bulk lane
    takes only A. The skipped tenant's rows are never walked (the quick lane's claim
    costs the few rows it returns, however large A's backlog), the chosen ones are read
    by id, and the same index serves both."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    backend.execute("outbox_fill_tenants", {"rows": ROWS})
    backend.execute("outbox_analyze")
    turns = {"per_tenant": 500, "weight_tenants": [], "weights": [], **lane}
    nodes = claim_plan(backend.target, WORK_SERVER_OPTIONS, [], "outbox_claim_batch_fair", **turns)
    assert "outbox_events_tenant_idx" in index_scans(nodes), nodes
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], nodes
    assert tenant_index_rows(nodes) < 16 * (rows + 2 * 4) + 64
    assert nodes[0]["Actual Rows"] == 16 * rows


@pytest.mark.parametrize("name", ["outbox_claim_batch_tenant", "outbox_claim_batch_tenant_skip"])
def test_a_one_tenant_claim_walks_only_that_tenant_s_entries(pg_url: str, name: str) -> None:
    """The bulk lane with one tenant: per shard, one walk of that tenant's entries of
    outbox_events_tenant_idx, stopping at the limit; each row read once (no second read by
    id), no other tenant's rows, no walk of the primary key."""
    backend = postgres_backend(pg_url)
    backend.migrate()
    backend.execute("outbox_fill_tenants", {"rows": ROWS})
    backend.execute("outbox_analyze")
    nodes = claim_plan(backend.target, WORK_SERVER_OPTIONS, [], name, tenant="A")
    scans = index_scans(nodes)
    assert "outbox_events_tenant_idx" in scans, nodes
    assert not scans & {"outbox_events_pkey", "outbox_events_unpublished_idx"}, nodes
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], nodes
    # The byte budget's running sum reads one entry past the limit per shard (the window
    # looks ahead before the limit stops it); that row is neither detoasted nor returned.
    assert 16 * 500 <= tenant_index_rows(nodes) <= 16 * 501
    assert nodes[0]["Actual Rows"] == 16 * 500
