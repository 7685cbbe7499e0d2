"""Keep freed heap memory in the process instead of handing it back to the OS after every free (glibc only).

Generation grows each layer's KV cache by one token per step (`torch.cat` into a new, slightly larger buffer,
then the old one is freed). With glibc's defaults a free at the top of the heap gives the memory back (trim
threshold 128 KiB), and the next, larger buffer faults it in again page by page: measured on tiny-digitmap
(32 completions x 129 tokens per batch, one core) ~18,000 minor page faults and 185-195 ms per batch, against
~0 faults and 150-160 ms with the thresholds below (`bench/allocator-faults/allocator_faults.py`). A sampler node generated 29 %
slower per batch than the single-process trainer (whose training frees happened to keep the heap large) until
this was set.

`keep_freed_memory()` is called once by the CLI before any command runs. It changes how much freed memory a
process keeps (up to `TRIM_THRESHOLD` at the heap's top), never what it computes. Other C libraries (musl,
macOS) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 128 * 2**20  # free memory kept at the heap's top before it is given back
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest: allocations above this still get (and return) their own mapping


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds for this process; True when glibc took both settings."""
    if platform.libc_ver()[0] != "glibc":  # musl, macOS, Windows: their allocators have no such knobs
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    return all(
        libc.mallopt(param, value) == 1
        for param, value in ((M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    )
