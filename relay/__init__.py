"""The relay: publishes committed outbox events to Kafka, in order per key.

Installed with the `relay` extra (`pip install 'outbox-relay[relay]'`).
"""

from outbox_core.distribution import require

require("relay", "relay")
