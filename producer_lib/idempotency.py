"""Idempotency keys: what a key promises, and the verdict on a key already used.

A key is held per (idempotency_scope, idempotency_key) with the hash of the event's body.
The SQL path (plans.emit_one, against outbox_idempotency) and RecordingOutbox (in memory)
both hand a used key to `reused`, so both give the same answer: the first event's id for
the same body, IdempotencyConflict for another.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import TYPE_CHECKING

from producer_lib.errors import IdempotencyConflict

if TYPE_CHECKING:
    from producer_lib.events import EventRow


def body_hash(
    topic: str,
    key: str,
    event_type: str,
    payload: bytes,
    user: dict[str, str],
    tenant: str | None = None,
) -> bytes:
    """What an idempotency key promises: the same event body, whatever its event_id. The
    tenant counts only when there is one, so the hashes stored before tenants existed
    still match their events."""
    h = hashlib.sha256()
    parts = (topic, key, event_type, json.dumps(user, sort_keys=True))
    for part in parts if tenant is None else (*parts, "tenant", tenant):
        encoded = part.encode()
        h.update(len(encoded).to_bytes(8, "big"))
        h.update(encoded)
    h.update(payload)
    return h.digest()


def reused(row: EventRow, stored_hash: bytes, stored_event_id: uuid.UUID | str) -> uuid.UUID:
    """row's idempotency key is already held for stored_event_id's body: that event's id
    when row's body is the same (nothing is written), IdempotencyConflict when it differs."""
    if bytes(stored_hash) != row.body_hash:
        raise IdempotencyConflict(
            f"idempotency key {row.idempotency_key!r} was used for event "
            f"{stored_event_id} with a different body",
            idempotency_key=str(row.idempotency_key),
            existing_event_id=str(stored_event_id),
        )
    if isinstance(stored_event_id, uuid.UUID):
        return stored_event_id
    return uuid.UUID(str(stored_event_id))
