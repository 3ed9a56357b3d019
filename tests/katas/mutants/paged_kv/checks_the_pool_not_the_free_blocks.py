"""Compares the blocks an append needs with the pool's size instead of the free blocks: a refused append has already taken some blocks when the allocator runs out.

Mutant of solutions/paged_kv.py for the paged_kv suite.
"""

EDITS = [
    (
        """        need = sum(self.blocks_needed(s, T) for s, _ in first)
        if need > self.allocator.num_free:""",
        """        need = sum(self.blocks_needed(s, T) for s, _ in first)
        if need > self.num_blocks:""",
    ),
]
