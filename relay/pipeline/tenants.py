"""Fair turns between tenants: the settings, and the claim they ask for.

Without them a shard's rows go out in id order, so a tenant that commits a million events
at once puts every other tenant's events behind them for minutes. With fair_tenants on,
each shard's batch takes turns between the tenants that have rows in the shard (the
untenanted rows are one tenant of their own): a tenant of weight w gets w rows a turn,
and tenant_max_rows caps one tenant's rows in one shard's batch. A key belongs to one
tenant, so per-key order is the claim's as always. The SQL is outbox_claim_batch_fair,
or outbox_claim_batch_tenant for a lane claiming one tenant (no turns to take).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator

from outbox_core.settings import SettingsGroup
from outbox_core.tenants import MAX_TENANT_CHARS
from relay.store import TenantTurns

# A weight is rows per turn; past a batch's largest size it means nothing more.
MAX_WEIGHT = 10_000

TenantName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TENANT_CHARS)]
Weight = Annotated[int, Field(ge=1, le=MAX_WEIGHT)]


class TenantSettings(SettingsGroup):
    """How a claim shares a shard's batch between tenants."""

    fair_tenants: bool = Field(
        default=False,
        description="Each shard's batch takes turns between the tenants with pending rows "
        "(emit(..., tenant=...); untenanted rows count as one tenant) instead of id order, "
        "so one tenant's backlog cannot delay the others. Off: the claim is the plain one.",
    )
    tenant_weights: dict[TenantName, Weight] = Field(
        default_factory=dict,
        description="With fair_tenants: rows per turn of the named tenants (others get 1), "
        'as name=weight pairs ("acme=3,globex=2") or a JSON object.',
    )
    tenant_max_rows: int | None = Field(
        default=None,
        ge=1,
        description="With fair_tenants: at most this many rows of one tenant in one shard's "
        "batch per cycle (none: up to batch_size).",
    )

    tenant_bulk_rows: int = Field(
        default=100,
        ge=0,
        description="With fair_tenants: a tenant found with this many rows due in one shard "
        "(or tenant_max_rows, when lower) drains in a lane of its own, whose batches run "
        "beside the other tenants' instead of in front of them; it rejoins the others once "
        "its backlog is gone. 0: one lane for every tenant.",
    )

    @field_validator("tenant_weights", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        """The short form from the environment or a flag: acme=3,globex=2."""
        if not isinstance(value, str):
            return value
        weights: dict[str, str] = {}
        for pair in filter(None, (p.strip() for p in value.split(","))):
            name, sep, weight = pair.partition("=")
            if not sep or not name.strip():
                raise ValueError(
                    "expected name=weight pairs separated by commas (acme=3,globex=2) "
                    "or a JSON object"
                )
            weights[name.strip()] = weight.strip()
        return weights

    def bulk_rows(self) -> int | None:
        """The backlog that moves a tenant to the bulk lane (lanes.py); None: one lane."""
        return self.tenant_bulk_rows if self.fair_tenants and self.tenant_bulk_rows else None

    def turns(self) -> TenantTurns | None:
        """What the cycle's claims ask the store for: None keeps the plain claim."""
        if not self.fair_tenants:
            return None
        return TenantTurns(weights=dict(self.tenant_weights), max_rows=self.tenant_max_rows)
