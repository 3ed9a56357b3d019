"""The running max starts at 0, not -inf: a row whose scores are all far below 0 underflows to exp(s - 0) = 0.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        m = torch.full((*lead, i1 - i0, 1), float("-inf"))  # running max of the scaled scores""",
        r"""        m = torch.zeros(*lead, i1 - i0, 1)  # running max of the scaled scores""",
    ),
]
