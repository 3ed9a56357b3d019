"""The allocator's free list starts as range(num_blocks - 1, 0, -1): block 0 is never on it, so a pool of n blocks hands out n - 1.

Mutant of solutions/paged_kv.py for the paged_kv suite.
"""

EDITS = [
    (
        """        self._free = list(range(num_blocks - 1, -1, -1))""",
        """        self._free = list(range(num_blocks - 1, 0, -1))""",
    ),
]
