"""All the scores are computed at once, q @ k^T for every query and key, and the tiles sliced out of them.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)""",
        r"""    every = scores_of(qg, kg)  # (B, Hkv, G, Tq, Tk)
    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)""",
    ),
    (
        r"""            s = scores_of(q_tile, kg[..., j0:j1, :]) * scale  # (B, Hkv, G, rows, cols)""",
        r"""            s = every[..., i0:i1, j0:j1] * scale  # (B, Hkv, G, rows, cols)""",
    ),
]
