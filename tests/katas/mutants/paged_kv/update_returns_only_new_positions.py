"""update stores the new positions but returns only them, the k and v it was given, not the sequence's keys and values so far: attention then sees one chunk.

Mutant of solutions/paged_kv.py for the paged_kv suite.
"""

EDITS = [
    (
        """        k_all, v_all = self._append([seq_id], layer, k[None], v[None])
        return k_all[0], v_all[0]""",
        """        self._append([seq_id], layer, k[None], v[None])
        return k, v""",
    ),
]
