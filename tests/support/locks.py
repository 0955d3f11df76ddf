"""Work the xdist workers must not do at once, in any checkout on this machine: building
the images and installing helm (the first worker builds, the others then find it cached),
and building the wheel from a source tree (setuptools writes into the tree's build/)."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator

from scripts import containers


@contextlib.contextmanager
def one_at_a_time(name: str) -> Iterator[None]:
    """Holds the machine-wide lock `name` (a file in the project's cache) for the block."""
    containers.STATE.mkdir(parents=True, exist_ok=True)
    with open(containers.STATE / f"{name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
