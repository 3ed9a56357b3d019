"""Checks for room only as it allocates: a request that does not fit has already shared its hits and taken blocks when OutOfBlocksError comes.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        if needed > available:\n            raise OutOfBlocksError(",
        "        if needed > available + 10**9:\n            raise OutOfBlocksError(",
    ),
    (
        "        if self._plain:\n            block = self._plain.pop()\n        else:",
        '        if self._plain:\n            block = self._plain.pop()\n        elif not self._evictable:\n            raise OutOfBlocksError("no free or evictable block")\n        else:',
    ),
]
