"""Reports the most advanced layer's length (max, not min): length moves on as soon as layer 0 writes, mid-pass.

Mutant of solutions/kv_cache.py for the kv_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        return min(self._lens)""",
        r"""        return max(self._lens)""",
    ),
]
