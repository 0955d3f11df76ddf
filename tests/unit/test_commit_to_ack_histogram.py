"""outbox_relay_commit_to_ack_seconds takes a batch's events in one pass; what it exposes
must be what prometheus_client's own Histogram exposes for the same observations, one
observe() per event."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from relay.ops.metrics import _LATENCY_BUCKETS, BatchHistogram

NAME = "outbox_relay_commit_to_ack_seconds"


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("le", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_batch_histogram_exposes_what_one_observe_per_event_would(seed: int) -> None:
    rng = random.Random(seed)
    reference_registry, batch_registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram(NAME, "x", buckets=_LATENCY_BUCKETS, registry=reference_registry)
    batched = BatchHistogram(NAME, "x", _LATENCY_BUCKETS, batch_registry)
    now = 1_800_000_000.0
    for _batch in range(20):
        # Ages over every bucket and beyond the last; some batches empty.
        ages = [
            rng.choice((0.003, 0.04, 0.7, 8.0, 400.0)) * rng.random() * 2
            for _ in range(rng.randrange(0, 300))
        ]
        starts = [now - age for age in ages]
        rng.shuffle(starts)
        batched.observe_since(now, starts)
        for start in starts:
            reference.observe(now - start)
        now += rng.random()
    got, want = _samples(batch_registry), _samples(reference_registry)
    assert got.keys() == want.keys()
    for name_le, value in want.items():
        assert got[name_le] == pytest.approx(value, rel=1e-9), name_le


def test_an_empty_batch_observes_nothing() -> None:
    registry = CollectorRegistry()
    batched = BatchHistogram(NAME, "x", _LATENCY_BUCKETS, registry)
    batched.observe_since(1.0, [])
    assert _samples(registry)[(f"{NAME}_count", "")] == 0
