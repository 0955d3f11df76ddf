"""Contender "naive": bench/compare/naive_relay.py, one row per transaction and one awaited send per
event; stopped after --naive-max-s of draining, its rate being steady."""

from __future__ import annotations

from bench.compare.backlog import load_backlog
from bench.compare.common import PYTHON
from bench.compare.context import Context
from bench.compare.drain import Drain, drain_processes
from bench.shared.processes import Proc, launch, relay_env


async def drain_naive(ctx: Context, round_no: int) -> Drain:
    url, prefix, topic = await ctx.fresh("naive", f"_r{round_no}")
    load_s = load_backlog(url, ctx.backlog.events)
    cmd = [
        PYTHON,
        "-m",
        "bench.compare.naive_relay",
        "--database-url",
        url,
        "--bootstrap",
        ctx.services.bootstrap,
        "--topic-prefix",
        prefix,
    ]

    def start() -> list[Proc]:
        env = relay_env(url, ctx.services.bootstrap, prefix)
        return [launch(f"naive-r{round_no}", cmd, env, ctx.logdir)]

    result = await drain_processes(
        ctx, "naive", url, topic, load_s, start, ctx.args.naive_max_s or None, check_outbox=True
    )
    if not result.complete:
        result.note = f"stopped after {result.active_s:.0f} s with {result.events_out:,} of {result.events:,} published"
    ctx.done_with(url)
    return result
