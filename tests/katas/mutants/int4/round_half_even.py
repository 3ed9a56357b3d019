"""Rounds codes with np.round (half to even) instead of trunc(x + 0.5), so ties land differently from llama.cpp.

Mutant of solutions/int4.py for the int4 suite.
"""

EDITS = [
    (
        r"""    q = np.trunc((x - lo) * inv_d + np.float32(0.5)).astype(np.uint8).clip(0, 15)""",
        r"""    q = np.round((x - lo) * inv_d).astype(np.uint8).clip(0, 15)""",
    ),
]
