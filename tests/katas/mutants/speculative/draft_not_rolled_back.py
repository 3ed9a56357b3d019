"""Never truncates the draft's cache: the draft keeps its rejected drafts, proposes after tokens that were never kept, and runs out of cache room.

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        draft_cache.truncate(min(kept, draft_cache.length))
""",
        r"""""",
    ),
]
