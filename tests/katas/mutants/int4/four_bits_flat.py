"""Counts Q4_1 as exactly 4 bits per weight, forgetting the fp16 scale and minimum of every block.

Mutant of solutions/int4.py for the int4 suite.
"""

EDITS = [
    (
        r"""    "q4_1": Q4_1_BYTES / BLOCK,  # 0.625: 5 bits per weight, not 4""",
        r"""    "q4_1": 0.5,  # 0.625: 5 bits per weight, not 4""",
    ),
]
