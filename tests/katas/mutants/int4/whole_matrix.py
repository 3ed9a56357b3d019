"""Dequantizes the whole weight matrix before multiplying, holding 6.4x the packed bytes in fp32 at once.

Mutant of solutions/int4.py for the int4 suite.
"""

EDITS = [
    (
        r"""    slab = max(1, (1 << 16) // k)  # rows per slab: 2**16 floats, 256 KB of fp32""",
        r"""    slab = n  # everything at once""",
    ),
]
