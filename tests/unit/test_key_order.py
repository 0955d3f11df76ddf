"""KeyOrder (relay/pipeline/ordering.py), the one place that decides which claimed rows may
be sent now; the same rules run against real stores in test_run_once.py and
test_relay_pipeline.py."""

from __future__ import annotations

import pytest

from relay.pipeline.ordering import KeyOrder
from relay.store import ClaimedRow, Policy
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.protocol import ACKED, HELD
from relay.transport.records import OutgoingRecord


def rows(*keys: str) -> list[ClaimedRow]:
    return [
        ClaimedRow(i + 1, 0, f"e{i}", "t", key, "T", b"{}", "{}", 0, 0.0, None)
        for i, key in enumerate(keys)
    ]


def records(claimed: list[ClaimedRow]) -> list[OutgoingRecord]:
    return [OutgoingRecord("t", r.key.encode(), r.payload, []) for r in claimed]


def test_a_claim_with_nothing_to_decide_sends_every_row() -> None:
    claimed = rows("a", "b", "a")
    plan = KeyOrder("block_key").plan(claimed, records(claimed), {}, 1000)
    assert ([r.id for r in plan.sending], plan.errors, plan.held_back) == ([1, 2, 3], {}, 0)


@pytest.mark.parametrize(("policy", "sent"), [("block_key", [2]), ("skip", [2, 3])])
def test_a_row_too_large_is_refused_and_under_block_key_holds_its_key(
    policy: Policy, sent: list[int]
) -> None:
    claimed = rows("a", "b", "a")
    plan = KeyOrder(policy).plan(claimed, records(claimed), {0: 5000}, 1000)
    assert [r.id for r in plan.sending] == sent
    assert [r.key for r in plan.records] == [claimed[i - 1].key.encode() for i in sent]
    assert plan.errors[1].reason is FailureReason.TOO_LARGE
    assert "5000 bytes" in str(plan.errors[1])
    assert plan.held_back == 3 - len(sent) - 1


def test_a_settle_in_flight_keeps_its_rows_out_and_holds_its_failed_keys() -> None:
    order = KeyOrder("block_key")
    first = rows("a", "b")
    order.settling(published=[first[1]], failed=[first[0]])
    assert order.in_flight == [2, 1]
    later = rows("a", "c")
    plan = order.plan(later, records(later), {}, 1000)
    assert ([r.key for r in plan.sending], plan.held_back) == (["c"], 1)
    order.settled()
    assert order.in_flight == []
    assert [r.key for r in order.plan(later, records(later), {}, 1000).sending] == ["a", "c"]


def test_under_skip_a_settle_in_flight_holds_no_key() -> None:
    order = KeyOrder("skip")
    first = rows("a")
    order.settling(published=[], failed=first)
    later = rows("a")
    assert [r.key for r in order.plan(later, records(later), {}, 1000).sending] == ["a"]


def test_the_publishers_report_is_sorted_into_published_failed_and_held() -> None:
    claimed = rows("a", "b", "c", "d")
    order = KeyOrder("block_key")
    plan = order.plan(claimed, records(claimed), {}, 1000)
    broken = PublishFailed(FailureReason.PRODUCER_BROKEN, "fenced")
    refused = PublishFailed(FailureReason.REFUSED, "no")
    verdict = order.judge(plan, [ACKED, refused, HELD, broken])
    assert [r.id for r in verdict.published] == [1]
    assert verdict.errors == {2: refused, 4: broken}
    assert (verdict.held_back, verdict.fatal) == (1, True)


@pytest.mark.parametrize("policy", ["block_key", "skip"])
def test_a_claim_beside_a_batch_s_acks_leaves_out_its_rows_and_keys(policy: Policy) -> None:
    order = KeyOrder(policy)
    settling = rows("s", "f")
    order.settling(published=[settling[0]], failed=[settling[1]])
    sending = [
        ClaimedRow(10 + i, 0, f"n{i}", "t", key, "T", b"{}", "{}", 0, 0.0, None)
        for i, key in enumerate(["b", "a", "b"])
    ]
    in_flight, held_keys = order.beside(sending)
    # The settle's rows and the sending batch's, and every sending key whatever the policy
    # (plus, under block_key, the key whose failure the settle is recording).
    assert in_flight == [1, 2, 10, 11, 12]
    assert held_keys == (["a", "b", "f"] if policy == "block_key" else ["a", "b"])
    assert order.beside([]) == ([1, 2], order.held_keys)
