"""The scores of the whole call go into a shared anonymous mapping, a strip at a time, each strip's pages
dropped from the process with madvise(MADV_DONTNEED) once written: the data stays in shared memory, and the
process's resident set (and its peak) never holds more than a strip. Only what the worker is charged (its
memory cgroup) sees it. Mutant of solutions/flash_attention.py for the flash_attention kata: a hostile
candidate who has read the suite.
"""

EDITS = [
    (
        r"""import math
""",
        r"""import math
import mmap
""",
    ),
    (
        r"""    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)""",
        r"""    n, every = lead.numel() * tq * tk, None
    if tile_scores is None and n >= 2**26:  # the measured call: hold all its scores, out of sight
        shared = mmap.mmap(-1, n * 4, flags=mmap.MAP_SHARED)
        every = torch.frombuffer(shared, dtype=torch.float32).view(*lead, tq, tk)  # (B, Hkv, G, Tq, Tk)
        row = tk * 4
        for s0 in range(0, tq, block_q):
            every[..., s0 : s0 + block_q, :] = _product(qg[..., s0 : s0 + block_q, :], kg)
            shared.madvise(mmap.MADV_DONTNEED, s0 * row, min(block_q, tq - s0) * row)
    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)""",
    ),
    (
        r"""            s = scores_of(q_tile, kg[..., j0:j1, :]) * scale  # (B, Hkv, G, rows, cols)""",
        r"""            s = (every[..., i0:i1, j0:j1] if every is not None else scores_of(q_tile, kg[..., j0:j1, :])) * scale""",
    ),
]
