"""Evicts the block let go most recently (MRU), not the one evictable longest.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "            block, _ = self._evictable.popitem(last=False)",
        "            block, _ = self._evictable.popitem(last=True)",
    ),
]
