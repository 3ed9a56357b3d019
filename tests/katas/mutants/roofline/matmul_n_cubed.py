"""Counts an n x n matmul as n**3 FLOPs: one per multiply-add instead of a multiply and an add.

Mutant of solutions/roofline.py for the roofline kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    return 2 * n**3 / seconds""",
        r"""    return n**3 / seconds""",
    ),
]
