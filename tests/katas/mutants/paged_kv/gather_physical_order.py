"""gather reads the sequence's blocks in physical (sorted) order instead of block-table order.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        table = torch.tensor(seq.table, dtype=torch.long, device=self._blocks.device)",
        "        table = torch.tensor(sorted(seq.table), dtype=torch.long, device=self._blocks.device)",
    ),
]
