"""RMSNorm adds eps outside the square root: x / (sqrt(mean(x^2)) + eps).

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)""",
        r"""    normed = xf / (xf.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)""",
    ),
]
