"""Contenders "ours", "ours2", "ours-delete" and "ours-mariadb": `python -m relay.cli run` with
every setting at its default, one process or two (replicas) on the same database, one
process with retention=delete, or one process on a MariaDB outbox; and the offered-load
latency of "ours" and "ours-mariadb", and of bench/steady_floor.py's loop launched the same
way (bench/relay_transactions.py's floor)."""

from __future__ import annotations

from collections.abc import Mapping

from bench.compare.common import PYTHON
from bench.compare.context import LATENCY_SUFFIX, Context
from bench.compare.drain import Drain, drain_processes
from bench.compare.latency import LatencyPoint, offered_loads, warm_rows
from bench.shared.processes import Proc, launch, relay_env

RELAY = [PYTHON, "-m", "relay.cli", "run"]
FLOOR = [PYTHON, "-m", "bench", "steady_floor"]


async def drain_relay(
    ctx: Context, contender: str, round_no: int, settings: Mapping[str, str] | None = None
) -> Drain:
    """settings: relay environment variables beyond the defaults (bench/record_formats.py:
    the record format)."""
    url, prefix, topic = await ctx.fresh(contender, f"_r{round_no}")
    load_s = ctx.load(url, ctx.backlog.events)
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
    """contender: ours (Postgres) or ours-mariadb; settings: as drain_relay's
    (bench/relay_transactions.py: Kafka transactions, the events then received
    read_committed)."""
    transactional = (settings or {}).get("OUTBOX_KAFKA_TRANSACTIONS") == "true"
    return await latency_of(ctx, contender, RELAY, settings, transactional)


async def latency_floor(
    ctx: Context,
    contender: str,
    gather_s: float,
    transactional: bool,
    settings: Mapping[str, str] | None = None,
) -> list[LatencyPoint]:
    """bench/steady_floor.py's loop sleeping gather_s, its sends one Kafka transaction a
    cycle when transactional (then received read_committed), in the relay's place."""
    cmd = [*FLOOR, "--gather-s", str(gather_s), *(["--transactions"] if transactional else [])]
    return await latency_of(ctx, contender, cmd, settings, transactional)


async def latency_of(
    ctx: Context,
    contender: str,
    cmd: list[str],
    settings: Mapping[str, str] | None,
    transactional: bool,
) -> list[LatencyPoint]:
    """cmd run on a fresh database and topic with the relay's environment (and settings),
    the outbox warmed first, then measured at the offered loads."""
    url, prefix, topic = await ctx.fresh(contender, LATENCY_SUFFIX)
    # A table that has seen traffic: the backlog loaded and analyzed, drained as warm-up.
    ctx.load(url, warm_rows(ctx))
    env = {**relay_env(url, ctx.services.bootstrap, prefix), **(settings or {})}
    proc = launch(f"{contender}-latency", cmd, env, ctx.logdir)
    try:
        return await offered_loads(contender, url, topic, ctx, proc, transactional)
    finally:
        proc.stop()
        ctx.done_with(url)
