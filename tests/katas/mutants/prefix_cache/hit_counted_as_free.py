"""Counts an evictable block that the request itself hits as free for its new blocks too: a request that does not fit is let in, and fails half-way.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        available = self.num_free - sum(1 for b in hits if self._refs[b] == 0)",
        "        available = self.num_free",
    ),
]
