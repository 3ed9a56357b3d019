"""RMSNorm computes in the input's dtype: fp16 squares of values above 256 overflow to inf.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    xf = x.float()
    normed""",
        r"""    xf = x
    normed""",
    ),
]
