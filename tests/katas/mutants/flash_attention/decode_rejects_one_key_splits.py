"""flash_decode refuses splits == Tk (one key per split) with an off-by-one bound: splits >= Tk raises.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    if splits > tk:""",
        r"""    if splits >= tk:""",
    ),
]
