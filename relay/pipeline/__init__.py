"""From claim to settle: the step (step.py), per-key order (ordering.py), the loop that
runs the step (loop.py) and the tenants' turns and lanes (tenants.py, lanes.py). The names
below are this package's public entry points (bench/ and tests drive the step with them)."""

from relay.pipeline.step import BatchOutcome, BatchRules, Sent, Step

__all__ = ["BatchOutcome", "BatchRules", "Sent", "Step"]
