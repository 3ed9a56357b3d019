"""The scores go, in place, into a Tq x Tk buffer that was allocated and touched when the module was imported.

The peak memory barely rises during the call, yet the whole matrix is held: only a bound on what the process
holds above its size before the import sees it. Mutant of solutions/flash_attention.py for the flash_attention
kata: a hostile candidate who has read the suite.
"""

EDITS = [
    (
        r"""TileScores = Callable[[Tensor, Tensor], Tensor]
""",
        r"""TileScores = Callable[[Tensor, Tensor], Tensor]
_SCORES = torch.ones(16384 * 16384)  # (Tq * Tk,) float32, 1 GiB: resident before any call is measured
""",
    ),
    (
        r"""    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)""",
        r"""    n = lead.numel() * tq * tk
    every = _SCORES[:n].view(*lead, tq, tk) if tile_scores is None and n <= _SCORES.numel() else None
    for i0 in range(0, tq if every is not None else 0, block_q):  # (B, Hkv, G, rows, Tk) at a time, in place
        every[..., i0 : i0 + block_q, :] = _product(qg[..., i0 : i0 + block_q, :], kg)
    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)""",
    ),
    (
        r"""            s = scores_of(q_tile, kg[..., j0:j1, :]) * scale  # (B, Hkv, G, rows, cols)""",
        r"""            s = (every[..., i0:i1, j0:j1] if every is not None else scores_of(q_tile, kg[..., j0:j1, :])) * scale""",
    ),
]
