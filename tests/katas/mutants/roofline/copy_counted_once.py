"""Counts a copy of N bytes as N bytes moved, forgetting that every byte read is also written.

Mutant of solutions/roofline.py for the roofline kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    return 2 * nbytes / seconds""",
        r"""    return nbytes / seconds""",
    ),
]
