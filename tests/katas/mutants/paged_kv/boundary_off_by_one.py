"""Counts blocks as num_tokens // block_size + 1, not the ceiling: a sequence that ends exactly on a block boundary takes one block too many.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        new = max(0, -(-(start + new_tokens) // bs) - len(seq.table))  # ceil division",
        "        new = max(0, (start + new_tokens) // bs + 1 - len(seq.table))",
    ),
    (
        "        while len(seq.table) * self.block_size < seq.tokens + new_tokens:",
        "        while len(seq.table) * self.block_size <= seq.tokens + new_tokens:",
    ),
]
