"""Where a key goes: its shard (shared with the relay) and its advisory-lock key."""

from __future__ import annotations

import hashlib
import zlib

MAX_SHARDS = 32767  # shard is a smallint
# First half of pg_advisory_xact_lock(int, int): keeps our locks apart from the app's.
DEFAULT_LOCK_NAMESPACE = 0x0B0C
# MariaDB's per-key lock: the rows of outbox_key_locks (migrations/mariadb/0006_key_locks.sql
# inserts exactly this many, slots 0..KEY_LOCK_SLOTS-1).
KEY_LOCK_SLOTS = 4096


def shard_for(key: str, shard_count: int) -> int:
    """Stable across processes, machines and Python versions (unlike hash())."""
    return zlib.crc32(key.encode("utf-8")) % shard_count


def lock_key(topic: str, key: str) -> int:
    """A signed 32-bit key for pg_advisory_xact_lock(namespace, key).

    Two different keys may share a lock key; that only serialises their writers a little
    more, it never breaks order.
    """
    digest = hashlib.blake2b(f"{topic}\x00{key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def key_lock_slot(topic: str, key: str) -> int:
    """The outbox_key_locks row a key's writers queue on (MariaDB): its lock key's slot."""
    return lock_key(topic, key) % KEY_LOCK_SLOTS
