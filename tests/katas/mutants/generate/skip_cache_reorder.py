"""Skips the cache reorder: each beam row keeps the keys and values of the beam it was, not of its new parent.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        cache.reorder((row_base + parent).view(-1))  # in every layer, row i now holds its parent's past
""",
        r"""""",
    ),
]
