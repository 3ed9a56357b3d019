"""fork copies the parent's block table but does not add a reference to its blocks: the blocks look unshared, so nothing is copied on write.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        """        for block in parent.table:
            self.allocator.share(block)
""",
        "",
    ),
]
