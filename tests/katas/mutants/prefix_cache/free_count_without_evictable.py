"""Counts only plain blocks as free: the evictable ones, which a request can take, are left out of num_free.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    ("        return len(self._plain) + len(self._evictable)", "        return len(self._plain)"),
    (
        "        available = self.num_free - sum(",
        "        available = self.num_free + len(self._evictable) - sum(",
    ),
    ("        if needed > self.num_free:", "        if needed > self.num_free + len(self._evictable):"),
]
