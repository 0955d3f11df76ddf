"""Contender "ceiling": bench/ceiling.py, the relay's claim and settle (delete) statements with
no Kafka: how fast Postgres lets the backlog be claimed and deleted on this machine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

from bench import procstat
from bench.compare.backlog import copy_database, load_backlog
from bench.compare.common import PYTHON, ROOT, loadavg
from bench.compare.context import Context
from bench.compare.drain import Drain
from bench.compare.processes import relay_env


async def drain_ceiling(ctx: Context, round_no: int) -> Drain:
    name = f"bench_{ctx.run_id}_ceiling_r{round_no}"
    ctx.dbs.append(name)
    url = copy_database(ctx.services, ctx.backlog, name)
    load_s = load_backlog(url, ctx.backlog.events)
    before = loadavg()
    pg_before = ctx.services.postgres_cpu()
    launched = time.time()
    res = await asyncio.to_thread(
        subprocess.run,
        [PYTHON, "-m", "bench.ceiling", "--database-url", url],
        env=relay_env(url, ctx.services.bootstrap, ""),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if res.returncode != 0:
        raise RuntimeError(f"bench.ceiling failed:\n{res.stdout}{res.stderr}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    pg_after = ctx.services.postgres_cpu()
    ctx.done_with(url)
    return Drain(
        contender="ceiling",
        events=ctx.backlog.events,
        delivered=int(out["settled"]),
        complete=int(out["settled"]) >= ctx.backlog.events,
        startup_s=float(out["first"]) - launched,
        active_s=float(out["done"]) - float(out["first"]),
        counted=int(out["settled"]),
        cpu_s=float(out["cpu_active_s"]),
        cpu_total_s=float(out["cpu_total_s"]),
        peak_rss_bytes=int(out["peak_rss_bytes"]),
        pg_cpu_s=procstat.cpu_between(pg_before, pg_after) if pg_after else None,
        load_s=load_s,
        loadavg=before,
        note="Postgres CPU over the whole process run, start-up included",
    )
