"""Writes into a shared block in place, without copying it first: a fork's append changes what its parent holds.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        if first < len(seq.table) and self.allocator.refcount(seq.table[first]) > 1:  # copy on write",
        "        if False:  # copy on write",
    ),
    (
        "        shared = start // bs < len(seq.table) and self.allocator.refcount(seq.table[start // bs]) > 1",
        "        shared = False",
    ),
]
