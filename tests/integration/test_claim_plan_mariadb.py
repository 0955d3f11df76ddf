"""Every claim on MariaDB reads outbox_events through an index: each shard's walk through
outbox_events_unpublished_idx (shard, published_at, id), or outbox_events_tenant_idx for a
lane's one tenant, the block_key rule's probe of a key's earlier blocking rows through
outbox_events_blocking_idx, the chosen rows of a fair claim by primary key. Never a scan
of the table, whether the rows are all pending or mostly published (retention=keep marks
kept rows in place when their payload is too large to move). And no claim writes a
temporary table to disk."""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox_core.executors import Statement, bind, union_of
from outbox_core.migrate import mariadb_statements
from relay.store.protocol import UNBOUNDED_BYTES
from relay.store.sql import CLAIM_QUERIES, CLAIMS_OF_SHARDS
from tests.support.db import Backend, mariadb_backend

pytestmark = pytest.mark.integration

# Every claim statement: the per-shard parts and the plain claim of several shards.
CLAIMS = sorted({*CLAIM_QUERIES.values(), *CLAIMS_OF_SHARDS.values()})

EVENTS_INDEXES = {
    "outbox_events_unpublished_idx",
    "outbox_events_tenant_idx",
    "outbox_events_blocking_idx",
    "PRIMARY",
}


def accesses(node: Any) -> list[dict[str, Any]]:
    """Every table access of an EXPLAIN FORMAT=JSON document."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if "table_name" in node and "access_type" in node:
            found.append(node)
        for value in node.values():
            found += accesses(value)
    elif isinstance(node, list):
        for value in node:
            found += accesses(value)
    return found


def statements(cur: Any, name: str, params: dict[str, Any]) -> list[str]:
    """The relay's own block (as bound for PyMySQL), rendered, statement by statement."""
    sql, bound = bind("pymysql", "mariadb", Statement(name, params))
    return mariadb_statements(cur.mogrify(sql, bound) + ";")


def explain(backend: Backend, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The accesses to outbox_events of each statement of the block."""
    conn = backend.connect()
    try:
        with conn.cursor() as cur:
            docs = []
            for sql in statements(cur, name, params):
                cur.execute("EXPLAIN FORMAT=JSON " + sql)
                docs.append(json.loads(cur.fetchone()[0]))
    finally:
        conn.close()
    # JSON_TABLE's rows are read whole (access_type ALL): they are the claim's parameters.
    return [a for a in accesses(docs) if a["table_name"] in ("e", "b", "u")]


def run_block(backend: Backend, name: str, params: dict[str, Any]) -> list[Any]:
    """Each statement of the block's rows, in order; and none wrote a temporary table to
    disk."""
    conn = backend.connect()
    try:
        [(before,)] = backend.run_on(conn, "session_disk_tables")
        with conn.cursor() as cur:
            found = []
            for sql in statements(cur, name, params):
                cur.execute(sql)
                found.append(list(cur.fetchall()))
        [(after,)] = backend.run_on(conn, "session_disk_tables")
    finally:
        conn.close()
    assert int(after) == int(before), f"{name} wrote a temporary table to disk"
    return found


def claim_params(**extra: Any) -> dict[str, Any]:
    return {
        "shard": 3,
        "shards": "[3, 4]",
        "head": 3,
        "limit": 500,
        "in_flight": "[1, 2, 3]",
        "shard_bytes": UNBOUNDED_BYTES,
        "held_keys": '["k1"]',
        "floors": "[0]",
        "tenant": "A",
        "per_tenant": 500,
        "weight_tenants": '["A"]',
        "weights": "[2]",
        "only": None,
        "skip": "[]",
        **extra,
    }


@pytest.fixture
def filled(mariadb_url: str) -> Backend:
    backend = mariadb_backend(mariadb_url)
    backend.migrate()
    backend.execute("outbox_fill")
    return backend


@pytest.mark.parametrize("published", [False, True], ids=["pending", "mostly_published"])
@pytest.mark.parametrize("name", CLAIMS)
def test_every_claim_reads_outbox_events_through_an_index(
    filled: Backend, name: str, published: bool
) -> None:
    if published:
        filled.execute("outbox_mark_published_below", {"below": 18_000})
    filled.execute("outbox_analyze")
    seen = explain(filled, name, claim_params())
    assert seen, "the plan reads outbox_events"
    for access in seen:
        assert access["access_type"] != "ALL", (name, access)
        assert access.get("key") in EVENTS_INDEXES, (name, access)
    blocking = [a for a in seen if a["table_name"] == "b"]
    if name.endswith("_skip"):
        assert blocking == []
    else:
        assert [a["key"] for a in blocking] == ["outbox_events_blocking_idx"], (name, blocking)
        # The seek starts at the blocking rows: the index's rows that cannot block are
        # never read (0007_blocking_rows.sql).
        assert blocking[0]["used_key_parts"][:3] == ["blocking", "shard", "key"], blocking


@pytest.mark.parametrize("published", [False, True], ids=["pending", "mostly_published"])
def test_the_claims_shard_filter_seeks_each_shard(filled: Backend, published: bool) -> None:
    """outbox_shards_unpublished, run before every claim, costs a seek per shard whatever
    the table holds."""
    if published:
        filled.execute("outbox_mark_published_below", {"below": 18_000})
    filled.execute("outbox_analyze")
    params = {"shards": json.dumps(list(range(16))), "limit": 500}
    seen = explain(filled, "outbox_shards_unpublished", params)
    # The EXISTS, and the walk that tells whether a shard has more than limit rows.
    assert [(a["key"], a["used_key_parts"][:2]) for a in seen] == [
        ("outbox_events_unpublished_idx", ["shard", "published_at"])
    ] * 2, seen


@pytest.mark.parametrize("name", CLAIMS)
def test_no_claim_writes_a_temporary_table_to_disk(filled: Backend, name: str) -> None:
    """A derived table holding a BLOB column (payload, headers) is materialized as an Aria
    table on disk, which cost a claim statement half its time in the server: the claims'
    derived tables hold ids and sizes, and the claimed rows are read after them."""
    # Tenant B has rows in odd shards (outbox_fill), A in even ones only; a shard has
    # 1,250 rows, so with a limit of 2,000 none has a backlog (outbox_claim_shards).
    claimed = run_block(filled, name, claim_params(tenant="B", limit=2000))[-1]
    assert claimed, "the claim read rows, so its derived tables held some"


def claimed_ids(rows: list[Any]) -> list[tuple[int, int]]:
    """(shard, id) of each claimed row, in the claim's order."""
    return [(int(r[1]), int(r[0])) for r in rows]


@pytest.mark.parametrize(
    ("shard_bytes", "expected"),
    [
        (UNBOUNDED_BYTES, [5] * 1250 + [2] * 1250 + [9] * 1250),
        (700, [5, 5, 2, 2, 9, 9]),  # two rows of 300 bytes a shard
        (200, [5]),  # only the head shard's first row, whatever its size
    ],
    ids=["all", "bytes", "head"],
)
@pytest.mark.parametrize("plain", sorted(CLAIMS_OF_SHARDS))
def test_the_claim_of_shards_without_a_backlog_returns_what_their_parts_do(
    filled: Backend, plain: str, shard_bytes: int, expected: list[int]
) -> None:
    """The store claims the shards with at most limit unpublished rows in one statement
    (outbox_claim_shards), a shard with more in a part of a UNION ALL of its own: both give
    each shard's first rows in id order, the same rows, the head shard's first row
    whatever its size; no temporary table on disk either way."""
    filled.execute("outbox_analyze")
    shards = [5, 2, 9]  # 1,250 pending rows each
    params = claim_params(
        limit=2000, in_flight="[]", held_keys="[]", shard_bytes=shard_bytes, head=5
    )
    conn = filled.connect()
    try:
        with conn.cursor() as cur:
            parts = [{**params, "shard": shard} for shard in shards]
            sql = bind("pymysql", "mariadb", Statement(plain, parts, union=True))[0]
            union = union_of(cur, sql, parts)
    finally:
        conn.close()
    conn = filled.connect()
    try:
        [(before,)] = filled.run_on(conn, "session_disk_tables")
        with conn.cursor() as cur:
            cur.execute(union)
            by_parts = claimed_ids(list(cur.fetchall()))
        [(after,)] = filled.run_on(conn, "session_disk_tables")
    finally:
        conn.close()
    assert int(after) == int(before), "the union wrote a temporary table to disk"
    assert [shard for shard, _ in by_parts] == expected
    for shard in shards:
        ids = [i for s, i in by_parts if s == shard]
        assert ids == sorted(ids)
    found, claimed = run_block(
        filled, CLAIMS_OF_SHARDS[plain], {**params, "shards": json.dumps(shards)}
    )
    assert sorted(found) == [(2, 0), (5, 0), (9, 0)]  # rows, none with a backlog
    assert sorted(claimed_ids(claimed)) == sorted(by_parts)


@pytest.mark.parametrize("plain", sorted(CLAIMS_OF_SHARDS))
def test_the_claim_of_shards_leaves_a_backlog_to_its_own_part(filled: Backend, plain: str) -> None:
    """A shard with more than limit unpublished rows is named (many) and left out: its
    part's walk stops after limit rows, where this statement would read them all."""
    # Shard 2 keeps about 60 of its 1,250 rows; 1 and 3 keep them all.
    filled.execute("outbox_mark_shard_published_below", {"shard": 2, "below": 19_000})
    params = claim_params(limit=500, in_flight="[]", held_keys="[]", head=1)
    found, claimed = run_block(filled, CLAIMS_OF_SHARDS[plain], {**params, "shards": "[1, 2, 3]"})
    assert sorted((int(shard), bool(many)) for shard, many in found) == [
        (1, True),
        (2, False),
        (3, True),
    ]
    assert {shard for shard, _ in claimed_ids(claimed)} == {2}
