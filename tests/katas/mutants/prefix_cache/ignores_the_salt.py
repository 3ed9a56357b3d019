"""Leaves the salt out of the first block's digest: two tenants with the same prompt share blocks.

Mutant of solutions/prefix_cache.py for the prefix_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        '    h.update(b"P" + parent if parent is not None else b"S" + ("" if salt is None else "\\0" + salt).encode())',
        '    h.update(b"P" + parent if parent is not None else b"S")',
    ),
]
