"""Applies the mask after the softmax: hidden keys get weight 0, but the visible weights no longer sum to 1.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""    scores = scores.masked_fill(~allowed, float("-inf"))  # before the softmax, so masked keys get weight 0
""",
        "",
    ),
    (
        r"""
    return (weights @ v.float()).to(q.dtype)  # (B, Hq, Tq, D)""",
        r"""
    weights = weights.masked_fill(~allowed, 0.0)
    return (weights @ v.float()).to(q.dtype)  # (B, Hq, Tq, D)""",
    ),
]
