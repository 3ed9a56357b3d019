"""Give back the pages of a memory-mapped tensor once its values live elsewhere.

A tensor mapped from the start-up cache's file and then copied into another layout (oneDNN's
prepacked bf16 matrices) would keep its pages resident beside the copy. `release(t)` calls
madvise(MADV_DONTNEED) on the whole pages inside t's bytes; for a file mapping a later read faults
them back in from the file. Only for tensors mapped from a file and never written: on anonymous
memory MADV_DONTNEED zeroes the pages. Not here: platforms other than Linux (release does nothing).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys

from torch import Tensor

MADV_DONTNEED = 4  # Linux's value (asm-generic/mman-common.h)


@functools.cache
def _madvise():
    """libc's madvise, looked up once."""
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return madvise


def page_range(start: int, nbytes: int, page: int = mmap.PAGESIZE) -> tuple[int, int]:
    """(first, length) of the whole pages inside [start, start + nbytes); length 0 if there are none."""
    first = -(-start // page) * page
    end = (start + nbytes) // page * page
    return first, max(0, end - first)


def release(t: Tensor) -> int:
    """Drop t's whole pages from this process's resident memory; returns the bytes released
    (0 off Linux, or for a tensor smaller than a page). Raises OSError if madvise refuses."""
    if not sys.platform.startswith("linux"):
        return 0
    first, length = page_range(t.data_ptr(), t.numel() * t.element_size())
    if length == 0:
        return 0
    if _madvise()(first, length, MADV_DONTNEED) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"madvise(MADV_DONTNEED) on {length} bytes of a mapped tensor failed")
    return length
