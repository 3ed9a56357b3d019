"""Divides the block's range by 16 levels instead of 15 steps: the top code never reaches the max.

Mutant of solutions/int4.py for the int4 suite.
"""

EDITS = [
    (
        r"""    d = (hi - lo) / np.float32(15)""",
        r"""    d = (hi - lo) / np.float32(16)""",
    ),
]
