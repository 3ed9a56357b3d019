"""RoPE rotates adjacent pairs (2i, 2i + 1), llama.cpp's pairing, on un-permuted rows: the pairing rope() promises is (i, i + D/2).

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    x1, x2 = x[..., : D // 2].float(), x[..., D // 2 :].float()  # (..., T, D/2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)""",
        r"""    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()  # (..., T, D/2) each
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2).to(x.dtype)""",
    ),
]
