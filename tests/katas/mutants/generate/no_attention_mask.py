"""Left-pads the prompts but passes no attention mask: shorter prompts attend to the pads and start at the wrong positions.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    return ids, None if bool(mask.all()) else mask""",
        r"""    return ids, None""",
    ),
]
