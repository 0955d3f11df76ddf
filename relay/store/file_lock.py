"""One relay per SQLite file: an OS file lock beside the database, released when the
process ends however it ends (SQLite has one writer; two relays would only contend)."""

from __future__ import annotations

import asyncio
import fcntl
import os

from relay.errors import StartupRefused


class RelayFileLock:
    def __init__(self, database_path: str, *, wait: bool) -> None:
        self._path = f"{database_path}.relay-lock"
        self._database = database_path
        self._wait = wait
        self._fd: int | None = None

    async def acquire(self) -> None:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not self._wait:
                    os.close(fd)
                    raise StartupRefused(
                        f"another relay is already running on {self._database} (SQLite allows "
                        "one relay per database file); stop it, or set sqlite_wait_for_lock "
                        "to wait"
                    ) from None
                await asyncio.sleep(0.5)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
