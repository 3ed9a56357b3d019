"""gather reads the sequence's slots in physical (sorted) order instead of block-table order.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        slots = self._slot_ids(seqs, lengths)  # (B, width)",
        "        slots = self._slot_ids(seqs, lengths).sort(dim=1).values  # (B, width)",
    ),
]
