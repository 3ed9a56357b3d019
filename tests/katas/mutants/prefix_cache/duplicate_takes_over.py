"""When a second block fills with a prefix that is already cached, makes it the cached one without un-caching the first: two blocks claim one prefix.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        if digest not in self._cached:\n            block = request.table",
        "        if True:\n            block = request.table",
    ),
]
