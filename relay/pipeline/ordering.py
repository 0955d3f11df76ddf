"""Per-key order inside the relay: the one module that decides which claimed rows may be
sent now, and what each row's outcome means for its key.

The database holds the durable half (the claim's blocking predicate, in the store's SQL:
a row waits while an earlier row of its key is parked or backing off). What the database
cannot know yet is decided here, per lane:

- in flight: the rows of the batch being settled are left out of the next claim (it runs
  while that settle does), so no row is sent twice at once; a claim made while a batch's
  acks are awaited (beside) leaves out that batch's keys as well;
- held: under block_key, a key with a failure the settle is still recording sends
  nothing of this claim: its rows stay pending, uncharged;
- failed: a row known to fail before sending (larger than the producer takes, or
  malformed: it cannot become a record) is refused here, and under block_key the later
  rows of its key in the claim are held with it. Either is parked at once, and a parked
  row blocks its key as any parked row does (until an operator retries or discards it);
- blocked: the failure policy. Under skip, a failed row holds nothing back.

The publisher only reports, per record: acked, failed (with its reason) or held
(relay/transport/protocol.py). It keeps the transport's side: a key's records of one
call are stored in order, acked or failed together, and nothing of a key is stored past
an earlier record of it that failed or was held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from relay.store import ClaimedRow, Policy
from relay.transport.errors import FailureReason, PublishFailed
from relay.transport.protocol import Acked, Held, Outcome
from relay.transport.records import OutgoingRecord

_ID = attrgetter("id")  # per published row: map() with it runs in C


@dataclass
class Plan:
    """What one claim may send: the rows and their records, and what was decided before
    sending (refused rows, held rows)."""

    sending: list[ClaimedRow]
    records: list[OutgoingRecord]
    errors: dict[int, PublishFailed] = field(default_factory=dict)  # by row id
    held_back: int = 0


@dataclass
class Verdict:
    """What became of a claim's rows once the publisher answered."""

    published: list[ClaimedRow]
    errors: dict[int, PublishFailed]  # by row id: fatal ones are not charged to their rows
    held_back: int
    fatal: bool


class KeyOrder:
    """Per-key order for one lane: its state is the batch being settled, if any."""

    def __init__(self, policy: Policy) -> None:
        self.block = policy == "block_key"
        self._in_flight: list[int] = []
        self._unrecorded: set[str] = set()  # keys with a failure the settle is recording

    @property
    def in_flight(self) -> list[int]:
        """Rows the settle in flight will write: the next claim leaves them out."""
        return self._in_flight

    @property
    def held_keys(self) -> list[str]:
        """Keys the next claim need not read: under block_key, those with a failure the
        settle in flight is still recording (plan would hold every row of theirs)."""
        return sorted(self._unrecorded) if self.block else []

    def beside(self, sending: Sequence[ClaimedRow]) -> tuple[list[int], list[str]]:
        """(in_flight, held_keys) for a claim made while `sending`'s acks are awaited: it
        leaves out those rows and every key they carry (whatever the policy), so a key
        never has rows of two claims in flight and its later rows wait for the outcome."""
        keys = {row.key for row in sending if type(row.key) is str}
        return [*self._in_flight, *map(_ID, sending)], sorted(keys.union(self.held_keys))

    def plan(
        self,
        rows: Sequence[ClaimedRow],
        records: list[OutgoingRecord],
        oversized: dict[int, int],
        limit: int,
        malformed: dict[int, str] | None = None,
    ) -> Plan:
        """Which claimed rows go out. oversized: {index: size} of the records larger than
        the producer takes (limit bytes); malformed: {index: what is wrong} of the rows
        that have no record."""
        held = self._unrecorded if self.block else set()
        malformed = malformed or {}
        if not oversized and not held and not malformed:
            return Plan(list(rows), records)  # most claims send every row
        plan = Plan([], [])
        failed: set[str] = set()
        for i, row in enumerate(rows):
            if self.block and (row.key in held or row.key in failed):
                plan.held_back += 1  # stays pending; the next claim waits behind its key
                continue
            if i in malformed:
                plan.errors[row.id] = PublishFailed(FailureReason.MALFORMED_ROW, malformed[i])
                failed.add(row.key)
                continue
            if i in oversized:
                # Known before sending: refused here, so nothing later of its key goes out.
                plan.errors[row.id] = PublishFailed(
                    FailureReason.TOO_LARGE,
                    f"record too large: {oversized[i]} bytes, more than "
                    f"kafka_max_request_size ({limit})",
                )
                failed.add(row.key)
                continue
            plan.sending.append(row)
            plan.records.append(records[i])
        return plan

    def judge(self, plan: Plan, outcomes: Sequence[Outcome]) -> Verdict:
        """Each sent row's outcome: published, failed (its key's later rows were not sent
        behind it: the publisher reports those held) or held."""
        published: list[ClaimedRow] = []
        errors = plan.errors
        held_back = plan.held_back
        fatal = False
        for row, outcome in zip(plan.sending, outcomes, strict=True):
            if isinstance(outcome, Acked):
                published.append(row)
            elif isinstance(outcome, Held):
                held_back += 1  # waits for its key's earlier rows: next claim
            else:
                fatal = fatal or outcome.fatal
                errors[row.id] = outcome
        return Verdict(published, errors, held_back, fatal)

    def settling(self, published: Sequence[ClaimedRow], failed: Sequence[ClaimedRow]) -> None:
        """A settle of these rows begins (failed: those whose failures it records): until
        it ends, the claim leaves them out and, under block_key, holds back the failed
        rows' keys."""
        self._in_flight = [*map(_ID, published), *map(_ID, failed)]
        self._unrecorded = {row.key for row in failed} if self.block else set()

    def settled(self) -> None:
        """The settle ended (or failed: the next claim reads the database's state)."""
        self._in_flight = []
        self._unrecorded = set()
