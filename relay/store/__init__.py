"""Where the relay's state lives: the Store protocol and its types (protocol.py), the one
SQL implementation (sql.py) and the file lock of an SQLite database (file_lock.py). The
protocol's names are this package's public entry points."""

from relay.store.protocol import (
    MOVE_MAX_BYTES,
    AppliedMigration,
    Backlog,
    ClaimedRow,
    ClaimRequest,
    Failure,
    FloorMark,
    HorizonHolder,
    Lease,
    Policy,
    Rotated,
    Rotation,
    Settled,
    SettleRequest,
    Store,
    TenantBacklog,
    TenantTurns,
)

__all__ = [
    "MOVE_MAX_BYTES",
    "AppliedMigration",
    "Backlog",
    "ClaimRequest",
    "ClaimedRow",
    "Failure",
    "FloorMark",
    "HorizonHolder",
    "Lease",
    "Policy",
    "Rotated",
    "Rotation",
    "SettleRequest",
    "Settled",
    "Store",
    "TenantBacklog",
    "TenantTurns",
]
