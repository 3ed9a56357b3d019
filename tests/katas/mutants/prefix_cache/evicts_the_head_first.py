"""Frees a request's blocks from its first to its last, so its head is evicted before its tail: the shared prefix goes first.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    ("        for block in reversed(request.table):", "        for block in request.table:"),
]
