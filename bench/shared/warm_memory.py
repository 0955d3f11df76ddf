"""Free memory made warm before a timed window, so every window of a bench starts from the
same state of the machine's memory.

On a VM whose free pages are handed back to the host (virtio free page reporting, as on
the Firecracker VMs these benches run on), a page that stayed free for a few seconds
costs several microseconds when it is next written: the host maps it again. A process
that writes hundreds of megabytes into fresh memory (a broker appending to its log, the
page cache under a database's writes) then spends most of its time in that first touch.
Which window of a bench finds warm free pages depends on what ran just before it (a
dropped database or topic frees warm pages; a large write uses them up), so windows
compared with each other can differ by the machine's memory, not by what they measure.

warm(n) writes n bytes of fresh anonymous memory and frees it: the next n bytes the
kernel hands out (to any process) are pages the host has just mapped. On a host without
page reporting it only costs the time of the write.
"""

from __future__ import annotations

import ctypes
import mmap
import time


def warm(nbytes: int) -> float:
    """Write nbytes of fresh anonymous memory (its first touch) and free it: the machine's
    next nbytes of free memory are warm. Returns the seconds the writing took."""
    if nbytes < 1:
        raise ValueError(f"warm takes a positive byte count, not {nbytes}")
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        view = (ctypes.c_char * nbytes).from_buffer(region)
        start = time.perf_counter()
        ctypes.memset(view, 1, nbytes)
        took = time.perf_counter() - start
        del view  # the buffer export must end before the region can close
    finally:
        region.close()
    return took
