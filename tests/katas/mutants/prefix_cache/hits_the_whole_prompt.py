"""Lets a hit cover the whole prompt: an all-cached prompt computes no token, so nothing gives the logits of its last position.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        for start in range(0, len(tokens) - 1 - self.block_size + 1, self.block_size):",
        "        for start in range(0, len(tokens) - self.block_size + 1, self.block_size):",
    ),
]
