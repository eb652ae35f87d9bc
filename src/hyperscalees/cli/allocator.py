"""Keep freed memory in the process instead of handing it back to the OS after every op.

A population forward allocates and frees many activation-sized temporaries per step.
glibc returns large blocks to the kernel at once (mmap threshold), so the next op
page-faults its way through fresh memory again; at width 1024 that made the ES step
~15% slower while inference, with fewer temporaries, barely noticed. Raising the
thresholds makes the allocator reuse those blocks. glibc only; a no-op elsewhere.

Process set-up, so it lives with the CLI: ``cli/main.py`` calls ``keep_freed_memory`` once
at start, and ``bench/peers.py`` passes ``keep_freed_memory_env`` to the processes it
compares. The library itself never touches the allocator.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
MIB = 1 << 20


def keep_freed_memory(mmap_threshold: int = 256 * MIB, trim_threshold: int = 1024 * MIB,
                      top_pad: int = 256 * MIB) -> bool:
    """Tune glibc's malloc for reuse; returns whether the settings took effect."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(opt, val) == 1 for opt, val in ((_M_MMAP_THRESHOLD, mmap_threshold),
                                                       (_M_TRIM_THRESHOLD, trim_threshold),
                                                       (_M_TOP_PAD, top_pad)))


def keep_freed_memory_env(mmap_threshold: int = 256 * MIB, trim_threshold: int = 1024 * MIB,
                          top_pad: int = 256 * MIB) -> dict[str, str]:
    """The same settings as environment variables, for child processes (glibc reads them at start).

    Benchmarks give them to every process they compare (ours and the peers'), so an
    allocator setting never decides a ratio.
    """
    return {"MALLOC_MMAP_THRESHOLD_": str(mmap_threshold), "MALLOC_TRIM_THRESHOLD_": str(trim_threshold),
            "MALLOC_TOP_PAD_": str(top_pad)}
