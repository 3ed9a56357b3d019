"""free forgets the sequence without releasing its blocks: they never return to the free list.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        """        for block in self._seq(seq_id).table:
            self.allocator.release(block)
        del self._seqs[seq_id]""",
        """        self._seq(seq_id)
        del self._seqs[seq_id]""",
    ),
]
