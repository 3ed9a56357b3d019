"""Names a block by its own tokens only, not chained to its parent: the same tokens after a different start are a hit.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        '    h.update(b"P" + parent if parent is not None else b"S" + ("" if salt is None else "\\0" + salt).encode())',
        '    h.update(b"S" + ("" if salt is None else "\\0" + salt).encode())',
    ),
]
