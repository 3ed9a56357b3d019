"""Reorders only layer 0's rows for beam search: every other layer keeps the old beams' keys and values.

Mutant of solutions/kv_cache.py for the kv_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        written = self._kv[:, :, :, :, :n]""",
        r"""        written = self._kv[:, :1, :, :, :n]""",
    ),
]
