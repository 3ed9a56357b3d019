"""Forgets a block's prefix when its last user frees it: nothing survives a request, so no later request hits.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "                if block in self._digest_of:\n                    self._evictable[block] = None\n",
        "                if block in self._digest_of:\n                    del self._cached[self._digest_of.pop(block)]\n                    self._plain.append(block)\n",
    ),
]
