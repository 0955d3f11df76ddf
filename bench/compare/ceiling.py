"""The ceilings a relay's drain is held against, each a program of its own printing one JSON
line (so its CPU and RSS are its own):

- "ceiling", "ceiling-keep": bench/compare/db_ceiling.py, the relay's claim and settle statements of
  that retention mode with no Kafka: how fast Postgres lets the backlog be claimed and
  deleted (or marked published) on this machine.
- "kafka": bench/compare/kafka_ceiling.py, the relay's publisher producing the same records from
  memory, cycle by cycle, with no database in the timed part.

The pipeline ceiling of a mode is 1 / (1/db + 1/kafka) (report.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Any

from bench.compare.audit import audit_topic
from bench.compare.backlog import copy_database, load_backlog
from bench.compare.common import PYTHON, ROOT
from bench.compare.context import Context
from bench.compare.drain import Drain
from bench.shared import procstat
from bench.shared.processes import relay_env
from bench.shared.procstat import loadavg


async def run_program(
    ctx: Context, contender: str, cmd: list[str], url: str, prefix: str, load_s: float
) -> Drain:
    before = loadavg()
    pg_before = ctx.services.postgres_cpu()
    kafka_before = procstat.total_cpu(ctx.services.kafka_pids())
    launched = time.time()
    res = await asyncio.to_thread(
        subprocess.run,
        [PYTHON, "-m", *cmd],
        env=relay_env(url, ctx.services.bootstrap, prefix),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if res.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed:\n{res.stdout}{res.stderr}")
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    pg_after = ctx.services.postgres_cpu()
    kafka_after = procstat.total_cpu(ctx.services.kafka_pids())
    count = int(out["count"])
    return Drain(
        contender=contender,
        events=ctx.backlog.events,
        delivered=count,
        complete=count >= ctx.backlog.events,
        startup_s=float(out["first"]) - launched,
        active_s=float(out["done"]) - float(out["first"]),
        counted=count,
        cpu_s=float(out["cpu_active_s"]),
        cpu_total_s=float(out["cpu_total_s"]),
        peak_rss_bytes=int(out["peak_rss_bytes"]),
        pg_cpu_s=procstat.cpu_between(pg_before, pg_after) if pg_after else None,
        kafka_cpu_s=procstat.cpu_between(kafka_before, kafka_after) if kafka_after else None,
        load_s=load_s,
        loadavg=before,
    )


async def drain_ceiling(ctx: Context, round_no: int, keep: bool) -> Drain:
    contender = "ceiling-keep" if keep else "ceiling"
    name = f"bench_{ctx.run_id}_{contender.replace('-', '_')}_r{round_no}"
    ctx.dbs.append(name)
    url = copy_database(ctx.services, ctx.backlog, name)
    load_s = load_backlog(url, ctx.backlog.events)
    cmd = ["bench.compare.db_ceiling", "--database-url", url, *(["--keep"] if keep else [])]
    result = await run_program(ctx, contender, cmd, url, "", load_s)
    result.kafka_cpu_s = None  # nothing of it reaches Kafka
    result.note = "Postgres CPU over the whole program, start-up included"
    ctx.done_with(url)
    return result


async def drain_kafka(ctx: Context, round_no: int) -> Drain:
    url, prefix, topic = await ctx.fresh("kafka", f"_r{round_no}")
    load_s = load_backlog(url, ctx.backlog.events)
    result = await run_program(ctx, "kafka", ["bench.compare.kafka_ceiling"], url, prefix, load_s)
    # Its Postgres time is the untimed read of the backlog, not part of the ceiling.
    result.pg_cpu_s = None
    result.note = (
        "rows claimed and turned into records before the clock starts; peak RSS holds "
        "the whole backlog; Kafka CPU over the whole program"
    )
    result.audit = await audit_topic(
        ctx.services.bootstrap, topic, ctx.args.partitions, ctx.backlog.events, url
    )
    ctx.done_with(url)
    return result
