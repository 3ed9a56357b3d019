"""The attention residual adds to the normed input h, not the raw stream x.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        x = x + y @ self.wo.T""",
        r"""        x = h + y @ self.wo.T""",
    ),
]
