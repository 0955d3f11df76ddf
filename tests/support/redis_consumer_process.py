"""A RedisSource as a child process, for the fault tests (SIGKILL, SIGSTOP):

    python -m tests.support.redis_consumer_process

Configured by environment:

    REDIS_TEST_DIALECT, REDIS_TEST_DATABASE   postgres + libpq URL, or sqlite + file path
    REDIS_TEST_URL, REDIS_TEST_STREAM, REDIS_TEST_GROUP, REDIS_TEST_NAME
    REDIS_TEST_CLAIM_IDLE_S                   the source's claim_idle_s
    REDIS_TEST_HANDLER_DELAY_S                the handler sleeps this long in its transaction
    REDIS_TEST_CRASH=<where>:<n>              os._exit(9) at the n-th occurrence of <where>:
        in_handler   the effect row is written, the transaction not committed
        before_ack   the transaction committed, the entry not acked
    REDIS_TEST_PAUSE=<n>                      SIGSTOP itself after the n-th commit, before its
                                              XACK (no transaction open); SIGCONT resumes it
After each entry it prints "REDIS-TEST-HANDLED n" (applied and duplicates so far); on
SIGTERM it stops and prints "REDIS-TEST-STATS applied=A duplicates=D".
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from consumer_lib.redis_source import RedisSource
from tests.support.consumers import backend_from, effect_handler
from tests.support.redis_consumers import redis_app, source_settings


def _env(name: str, default: str | None = None) -> str:
    value = os.environ.get(f"REDIS_TEST_{name}", default)
    if value is None:
        raise KeyError(f"REDIS_TEST_{name} is not set")
    return value


class _Crash:
    def __init__(self, spec: str) -> None:
        where, _, n = spec.partition(":")
        self.where, self.at, self.seen = where, int(n or 0), 0

    def hit(self, where: str) -> None:
        if where != self.where:
            return
        self.seen += 1
        if self.seen == self.at:
            sys.stderr.write(f"REDIS-TEST-CRASH {where} {self.at}\n")
            sys.stderr.flush()
            os._exit(9)


class _CrashingSource(RedisSource):
    crash: _Crash
    pause_at: int = 0
    commits: int = 0

    async def process(
        self, stream: str, entry_id: bytes, fields: dict[bytes, bytes], *, redelivered: bool
    ) -> None:
        await super().process(stream, entry_id, fields, redelivered=redelivered)
        # What a test waits for: this many entries handled (applied or duplicates) so far.
        handled = self.stats.applied + self.stats.duplicates
        print(f"REDIS-TEST-HANDLED {handled}", flush=True)

    async def before_ack(self, stream: str, entry_id: bytes) -> None:
        self.crash.hit("before_ack")
        self.commits += 1
        if self.commits == self.pause_at:
            print(f"REDIS-TEST-PAUSED {self.commits}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)


async def main() -> None:
    backend = backend_from(_env("DIALECT"), _env("DATABASE"))
    stream, group, name = _env("STREAM"), _env("GROUP"), _env("NAME")
    crash = _Crash(_env("CRASH", ""))
    app = redis_app(backend, stream, group)
    app._handlers.clear()
    app.handler(stream)(
        effect_handler(
            "sqlalchemy_async",
            backend.dialect,
            group,
            applied_by=name,
            delay_s=float(_env("HANDLER_DELAY_S", "0")),
            after_write=lambda event: crash.hit("in_handler"),
        )
    )
    settings = source_settings(_env("URL"), name, claim_idle_s=float(_env("CLAIM_IDLE_S")))
    source = _CrashingSource(app, settings)
    source.crash = crash
    source.pause_at = int(_env("PAUSE", "0"))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, source.stop)
    print(f"REDIS-TEST-READY {name}", flush=True)
    await source.run()
    await app.database.close()
    print(
        f"REDIS-TEST-STATS applied={source.stats.applied} duplicates={source.stats.duplicates}",
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
