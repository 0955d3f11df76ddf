"""Start-up checks: refuse to run (exit code 2) on a database this relay must not touch."""

from __future__ import annotations

from outbox_core.migrate import available
from relay.errors import StartupRefused
from relay.store import Store


async def check_database(store: Store, shard_count: int | None) -> int:
    """The shard_count to run with: the database's, which a configured one must equal."""
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
