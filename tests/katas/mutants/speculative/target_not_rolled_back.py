"""Never truncates the target's cache: the rejected drafts' keys and values stay, and later tokens attend to them.

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        target_cache.truncate(kept)
""",
        r"""""",
    ),
]
