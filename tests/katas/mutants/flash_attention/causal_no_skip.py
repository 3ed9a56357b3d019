"""Causal computes every tile and masks the future ones: tiles wholly above the diagonal are never skipped.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    end = min(tk, i1 - 1 + offset + 1) if causal else tk""",
        r"""    end = tk""",
    ),
]
