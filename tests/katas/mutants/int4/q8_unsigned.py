"""Reads Q8_0 codes as unsigned bytes, so negative weights come out near +2 * 128 * d.

Mutant of solutions/int4.py for the int4 suite.
"""

EDITS = [
    (
        r"""    q = b[:, 2:].view(np.int8).astype(np.float32)  # (n_blocks, 32)""",
        r"""    q = b[:, 2:].astype(np.float32)  # (n_blocks, 32)""",
    ),
]
