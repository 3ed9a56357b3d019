"""Causal is aligned top-left (query i sees keys 0..i), as SDPA's is_causal: with Tq != Tk the queries are the last Tq positions.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    offset = tk - tq
""",
        r"""    offset = 0  # query i sees keys 0..i
""",
    ),
]
