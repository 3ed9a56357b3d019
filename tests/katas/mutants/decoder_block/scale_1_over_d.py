"""Scales the scores by 1/D instead of 1/sqrt(D).

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""/ math.sqrt(q.shape[-1])""",
        r"""/ q.shape[-1]""",
    ),
]
