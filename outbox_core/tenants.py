"""What producers and the relay agree on about tenants (issue 16).

A tenant is optional on each event. The relay's fair claims take turns between the
tenants of a shard; the untenanted events (NULL) take their turns as one tenant of their
own, named '' inside the claim (outbox_events_tenant_idx indexes coalesce(tenant, '')),
which is why a tenant is never the empty string.
"""

from __future__ import annotations

MAX_TENANT_CHARS = 255
