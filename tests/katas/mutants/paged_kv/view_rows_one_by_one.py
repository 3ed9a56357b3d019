"""The batch view checks each row's blocks against the free ones on its own, not their sum: out of blocks half-way, the first rows have taken blocks and the step cannot be re-run cleanly.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        need = sum(self.blocks_needed(s, T) for s, _ in first)",
        "        need = max((self.blocks_needed(s, T) for s, _ in first), default=0)",
    ),
]
