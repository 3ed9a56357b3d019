"""A two-pass softmax: one pass over the key tiles for the row max, a second for the sum and output, so every score is computed twice.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        acc = torch.zeros(*lead, i1 - i0, d)  # running sum of exp(score - m) * v
""",
        r"""        acc = torch.zeros(*lead, i1 - i0, d)  # running sum of exp(score - m) * v
        for j0, j1, future in _key_tiles(i0, i1, tq, tk, block_k, causal):  # pass 1: the row max
            s = scores_of(q_tile, kg[..., j0:j1, :]) * scale
            if future is not None:
                s = s.masked_fill(future, float("-inf"))
            m = torch.maximum(m, s.amax(dim=-1, keepdim=True))
""",
    ),
]
