"""The batch view lets each row allocate in turn: out of blocks half-way, the first rows have written and the batch cannot be re-run.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        """        need = sum(self.cache.blocks_needed(s, k.shape[2]) for s in self.seq_ids)
        if need > self.cache.allocator.num_free:""",
        """        need = 0
        if need > self.cache.allocator.num_free:""",
    ),
]
