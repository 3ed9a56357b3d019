"""Causal skips a key tile once it lies past the block's *first* query's diagonal: later queries of the block lose keys they see.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    end = min(tk, i1 - 1 + offset + 1) if causal else tk""",
        r"""    end = min(tk, i0 + offset + 1) if causal else tk""",
    ),
]
