"""Reads truncate(n) as 'drop n positions' instead of 'keep the first n': a rollback keeps the wrong prefix.

Mutant of solutions/kv_cache.py for the kv_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        self._lens = [length] * self.n_layers""",
        r"""        self._lens = [n - length for n in self._lens]""",
    ),
]
