"""The last, ragged key block is dropped: the loop takes Tk // block_k whole blocks (none when block_k > Tk).

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    for j0 in range(0, max(end, 0), block_k):""",
        r"""    for j0 in range(0, max(end, 0) - block_k + 1, block_k):""",
    ),
]
