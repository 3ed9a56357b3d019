"""Attention forgets the causal mask: every position sees the future.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v""",
        r"""    return scores.softmax(dim=-1) @ v""",
    ),
]
