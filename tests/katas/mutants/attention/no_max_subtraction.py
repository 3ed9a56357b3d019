"""Skips subtracting the row maximum: exp() overflows to inf for scores near 1e4, and inf/inf = NaN.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""    row_max = scores.amax(dim=-1, keepdim=True)  # (B, Hq, Tq, 1)
    sees_a_key = row_max > float("-inf")
    weights = torch.exp(scores - torch.where(sees_a_key, row_max, 0.0))""",
        r"""    weights = torch.exp(scores)""",
    ),
]
