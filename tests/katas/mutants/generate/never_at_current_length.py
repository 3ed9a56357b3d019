"""Bounds the running beams at the current length for early_stopping='never' too, instead of at max_new_tokens.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        length = max_new_tokens if early_stopping == "never" and length_penalty > 0 else step + 1""",
        r"""        length = step + 1""",
    ),
]
