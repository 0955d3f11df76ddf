"""Where the relay's state lives: the Store protocol and its types (protocol.py), the one
SQL implementation (sql.py), the plans it shares with the operator commands (plans.py)
and the file lock of an SQLite database (file_lock.py). The protocol's names are this
package's public entry points."""

from relay.store.protocol import (
    MAX_LIMIT,
    MOVE_MAX_BYTES,
    AppliedMigration,
    Backlog,
    Changed,
    ClaimedRow,
    ClaimRequest,
    Failure,
    FloorMark,
    HorizonHolder,
    Lease,
    ParkedRow,
    Policy,
    ReplayFilter,
    Rotated,
    Rotation,
    RowFilter,
    Settled,
    SettleRequest,
    Store,
    TenantBacklog,
    TenantTurns,
)

__all__ = [
    "MAX_LIMIT",
    "MOVE_MAX_BYTES",
    "AppliedMigration",
    "Backlog",
    "Changed",
    "ClaimRequest",
    "ClaimedRow",
    "Failure",
    "FloorMark",
    "HorizonHolder",
    "Lease",
    "ParkedRow",
    "Policy",
    "ReplayFilter",
    "Rotated",
    "Rotation",
    "RowFilter",
    "SettleRequest",
    "Settled",
    "Store",
    "TenantBacklog",
    "TenantTurns",
]
