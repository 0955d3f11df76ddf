"""Contenders "ours", "ours2", "ours-delete" and "ours-mariadb": `python -m relay.cli run` with
every setting at its default, one process or two (replicas) on the same database, one
process with retention=delete, or one process on a MariaDB outbox; and the offered-load
latency of "ours" and "ours-mariadb", and of bench/steady_floor.py's loop launched the same
way (bench/relay_transactions.py's floor).

Contenders "floor" and "floor-mariadb": bench/steady_floor.py's at-least-once loop
(--settle: read a batch, send it in one produce request, delete what Kafka acked) on the
Postgres and the MariaDB outbox, drained and loaded as the relay is, in its place: the
cheapest program doing the relay's work, so the relay's MariaDB/Postgres ratios can be
held against the floor's."""

from __future__ import annotations

from collections.abc import Mapping

from bench.compare.common import PYTHON
from bench.compare.context import LATENCY_SUFFIX, Context
from bench.compare.drain import Drain, drain_processes
from bench.compare.latency import LatencyPoint, offered_loads, warm_rows
from bench.shared.processes import Proc, launch, relay_env
from outbox_core.migrate import DEFAULT_SHARD_COUNT
from relay.config import field_help

RELAY = [PYTHON, "-m", "relay.cli", "run"]
FLOOR = [PYTHON, "-m", "bench", "steady_floor"]


def relay_default(env: str) -> str:
    """A relay setting's default, not its environment's: relay_env launches the relay
    without OUTBOX_* settings."""
    return next(default for _, name, _, default in field_help() if name == env)


# At a steady load a relay cycle finds fewer than probe_gather_rows rows, so the relay
# starts a cycle every probe_gather_s (relay/pipeline/loop.py); the floor sleeps as long.
RELAY_GATHER_S = float(relay_default("OUTBOX_PROBE_GATHER_S"))
# What a relay cycle claims at most: batch_size rows of every shard (the schema's count).
RELAY_CYCLE_ROWS = int(relay_default("OUTBOX_BATCH_SIZE")) * DEFAULT_SHARD_COUNT
# The relay's own floor of both databases, at least once (bench/steady_floor.py --settle).
FLOOR_SETTLE = [*FLOOR, "--settle", "--limit", str(RELAY_CYCLE_ROWS)]


def transactional(settings: Mapping[str, str] | None) -> bool:
    return (settings or {}).get("OUTBOX_KAFKA_TRANSACTIONS") == "true"


async def drain_relay(
    ctx: Context, contender: str, round_no: int, settings: Mapping[str, str] | None = None
) -> Drain:
    """settings: relay environment variables beyond the defaults (bench/record_formats.py:
    the record format)."""
    return await drain_of(ctx, contender, round_no, RELAY, settings, transactional(settings))


async def drain_floor(ctx: Context, contender: str, round_no: int) -> Drain:
    """floor or floor-mariadb: the at-least-once floor loop, a cycle as large as the
    relay's, in the relay's place."""
    cmd = [*FLOOR_SETTLE, "--gather-s", str(RELAY_GATHER_S)]
    return await drain_of(ctx, contender, round_no, cmd, None, False)


async def drain_of(
    ctx: Context,
    contender: str,
    round_no: int,
    cmd: list[str],
    settings: Mapping[str, str] | None,
    transactional: bool,
) -> Drain:
    """cmd drains a fresh, loaded outbox with the relay's environment (and settings)."""
    url, prefix, topic = await ctx.fresh(contender, f"_r{round_no}")
    load_s = ctx.load(url, ctx.backlog.events)
    env = {**relay_env(url, ctx.services.bootstrap, prefix), **(settings or {})}
    if contender == "ours-delete":
        env["OUTBOX_RETENTION"] = "delete"
    replicas = 2 if contender == "ours2" else 1

    def start() -> list[Proc]:
        return [
            launch(f"{contender}-r{round_no}-{i}", cmd, env, ctx.logdir) for i in range(replicas)
        ]

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
    return await latency_of(ctx, contender, RELAY, settings, transactional(settings))


async def latency_floor(
    ctx: Context,
    contender: str,
    gather_s: float,
    transactional: bool,
    settings: Mapping[str, str] | None = None,
    settle: bool = False,
) -> list[LatencyPoint]:
    """bench/steady_floor.py's loop sleeping gather_s, its sends one Kafka transaction a
    cycle when transactional (then received read_committed), at least once when settle
    (FLOOR_SETTLE), in the relay's place."""
    cmd = [
        *(FLOOR_SETTLE if settle else FLOOR),
        *("--gather-s", str(gather_s)),
        *(["--transactions"] if transactional else []),
    ]
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
