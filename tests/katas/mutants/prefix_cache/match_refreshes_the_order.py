"""Lets match() refresh the eviction order of the blocks it finds: a look that changes nothing still moves evictable blocks to the back of the queue.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        '        return len(self._hits(_tokens(tokens, "tokens"), salt)) * self.block_size',
        '        hits = self._hits(_tokens(tokens, "tokens"), salt)\n'
        "        for block in hits:\n"
        "            if block in self._evictable:\n"
        "                self._evictable.move_to_end(block)\n"
        "        return len(hits) * self.block_size",
    ),
]
