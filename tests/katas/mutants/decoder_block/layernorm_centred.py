"""RMSNorm subtracts the mean first (LayerNorm without a bias), which Llama's norm does not do.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    xf = x.float()
    normed""",
        r"""    xf = x.float()
    xf = xf - xf.mean(dim=-1, keepdim=True)
    normed""",
    ),
]
