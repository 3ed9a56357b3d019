"""Sets a layer's length to the size of the latest write (= instead of +=): decode positions restart at 0 after one step.

Mutant of solutions/kv_cache.py for the kv_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        self._lens[layer] = end""",
        r"""        self._lens[layer] = end - start""",
    ),
]
