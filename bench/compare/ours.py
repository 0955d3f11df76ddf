"""Contenders "ours", "ours2" and "ours-delete": `python -m relay.cli run` with every setting at
its default, one process or two (replicas) on the same database, or one process with
retention=delete; and its offered-load latency."""

from __future__ import annotations

from collections.abc import Mapping

from bench.compare.backlog import load_backlog
from bench.compare.common import PYTHON
from bench.compare.context import Context
from bench.compare.drain import Drain, drain_processes
from bench.compare.latency import LatencyPoint, offered_loads, warm_rows
from bench.shared.processes import Proc, launch, relay_env

RELAY = [PYTHON, "-m", "relay.cli", "run"]


async def drain_relay(
    ctx: Context, contender: str, round_no: int, settings: Mapping[str, str] | None = None
) -> Drain:
    """settings: relay environment variables beyond the defaults (bench/record_formats.py:
    the record format)."""
    url, prefix, topic = await ctx.fresh(contender, f"_r{round_no}")
    load_s = load_backlog(url, ctx.backlog.events)
    env = {**relay_env(url, ctx.services.bootstrap, prefix), **(settings or {})}
    if contender == "ours-delete":
        env["OUTBOX_RETENTION"] = "delete"
    replicas = 2 if contender == "ours2" else 1

    def start() -> list[Proc]:
        return [
            launch(f"{contender}-r{round_no}-{i}", RELAY, env, ctx.logdir) for i in range(replicas)
        ]

    transactional = (settings or {}).get("OUTBOX_KAFKA_TRANSACTIONS") == "true"
    result = await drain_processes(
        ctx,
        contender,
        url,
        topic,
        load_s,
        start,
        None,
        check_outbox=True,
        transactional=transactional,
    )
    ctx.done_with(url)
    return result


async def latency_ours(
    ctx: Context, contender: str = "ours", settings: Mapping[str, str] | None = None
) -> list[LatencyPoint]:
    """settings: as drain_relay's (bench/relay_transactions.py: Kafka transactions, the
    events then received read_committed)."""
    url, prefix, topic = await ctx.fresh(contender, "_latency")
    # A table that has seen traffic: the backlog loaded and analyzed, drained as warm-up.
    load_backlog(url, warm_rows(ctx))
    env = {**relay_env(url, ctx.services.bootstrap, prefix), **(settings or {})}
    proc = launch(f"{contender}-latency", RELAY, env, ctx.logdir)
    transactional = (settings or {}).get("OUTBOX_KAFKA_TRANSACTIONS") == "true"
    try:
        return await offered_loads(contender, url, topic, ctx, proc, transactional)
    finally:
        proc.stop()
        ctx.done_with(url)
