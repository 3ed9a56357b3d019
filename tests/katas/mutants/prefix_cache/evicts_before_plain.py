"""Takes an evictable cached block before a plain free one: prefixes are lost while empty blocks sit unused.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        if self._plain:\n            block = self._plain.pop()",
        "        if self._plain and not self._evictable:\n            block = self._plain.pop()",
    ),
]
