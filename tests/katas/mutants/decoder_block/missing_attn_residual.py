"""The attention sublayer replaces the residual stream instead of adding to it.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        x = x + y @ self.wo.T""",
        r"""        x = y @ self.wo.T""",
    ),
]
