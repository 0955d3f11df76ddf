"""One backlog drained by the relay once per record format, in the same run: bench/compare's
template database (producer_lib's order events), a copy of it and a fresh topic per drain,
the drain watched from the topic's end offsets and the topic audited whole afterwards
(bench/compare/drain.py, audit.py). Rounds alternate the order of the formats, so that
none always drains first on a cold machine or last on a warm one."""

from __future__ import annotations

from collections.abc import Sequence

from bench.compare.common import say
from bench.compare.context import Context
from bench.compare.drain import Drain
from bench.compare.ours import drain_relay
from bench.formats.settings import relay_settings


def round_order(formats: Sequence[str], round_no: int) -> list[str]:
    """The formats in the order round round_no drains them: reversed every other round."""
    return list(reversed(formats)) if round_no % 2 else list(formats)


async def drain_formats(
    ctx: Context, formats: Sequence[str], rounds: int
) -> dict[str, list[Drain]]:
    drains: dict[str, list[Drain]] = {}
    for round_no in range(rounds):
        for name in round_order(formats, round_no):
            say(f"drain {name} (round {round_no + 1}/{rounds}): {ctx.backlog.events:,} events")
            d = await drain_relay(ctx, name, round_no, relay_settings(name))
            drains.setdefault(name, []).append(d)
            a = d.audit
            say(
                f"drain {name}: {d.rate:,.0f} events/s ({d.counted:,} records in {d.active_s:.1f}s, "
                f"CPU {d.cpu_us_per_event:.1f} µs/event, load {d.loadavg})"
                + (
                    ""
                    if a is None
                    else f"; audit: {a.distinct:,} distinct, {a.lost:,} lost, "
                    f"{a.duplicates:,} duplicates, {a.order_violations:,} order violations, "
                    f"{a.unreadable:,} unreadable"
                )
            )
    return drains


def unsound(drains: dict[str, list[Drain]], events: int) -> list[str]:
    """The formats whose drains lost, reordered or left out events (or could not be read)."""
    return sorted(
        name
        for name, runs in drains.items()
        if any(
            d.audit is None
            or d.audit.lost
            or d.audit.order_violations
            or d.audit.unreadable
            or d.audit.distinct != events
            for d in runs
        )
    )
