"""Writes each new chunk at slot 0 instead of after the cached positions: decode overwrites the prompt's first token.

Mutant of solutions/kv_cache.py for the kv_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        kbuf[:, :, start:end] = k  # in place: no new storage
        vbuf[:, :, start:end] = v""",
        r"""        kbuf[:, :, :end - start] = k  # in place: no new storage
        vbuf[:, :, :end - start] = v""",
    ),
]
