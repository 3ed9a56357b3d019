"""Finds the block a write starts in from the last written position, (num_tokens - 1) // block_size: a fork that ends on a block boundary copies its last full block, which nobody writes again.

Mutant of solutions/paged_kv.py for the paged_kv suite.
"""

EDITS = [
    (
        """        shared = start // bs < len(seq.table) and self.allocator.refcount(seq.table[start // bs]) > 1""",
        """        at = max(0, start - 1) // bs
        shared = at < len(seq.table) and self.allocator.refcount(seq.table[at]) > 1""",
    ),
    (
        """        first = seq.tokens // self.block_size""",
        """        first = max(0, seq.tokens - 1) // self.block_size""",
    ),
]
