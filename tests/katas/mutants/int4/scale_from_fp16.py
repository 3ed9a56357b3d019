"""Computes the codes from the fp16-rounded scale and minimum, so some codes differ from llama.cpp's by one.

Mutant of solutions/int4.py for the int4 suite.
"""

EDITS = [
    (
        r"""        inv_d = np.where(d == 0, np.float32(0), np.float32(1) / d)  # the codes use the fp32 scale
    q = np.trunc((x - lo) * inv_d + np.float32(0.5)).astype(np.uint8).clip(0, 15)""",
        r"""        inv_d = np.where(d == 0, np.float32(0), np.float32(1) / d)  # the codes use the fp32 scale
    lo, inv_d = lo.astype(np.float16).astype(np.float32), np.where(d == 0, 0, 1 / d.astype(np.float16).astype(np.float32)).astype(np.float32)
    q = np.trunc((x - lo) * inv_d + np.float32(0.5)).astype(np.uint8).clip(0, 15)""",
    ),
]
