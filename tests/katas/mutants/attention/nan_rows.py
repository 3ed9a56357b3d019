"""Uses a plain softmax: a query that sees no key has a row of -inf and gets 0/0 = NaN.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""    row_max = scores.amax(dim=-1, keepdim=True)  # (B, Hq, Tq, 1)
    sees_a_key = row_max > float("-inf")
    weights = torch.exp(scores - torch.where(sees_a_key, row_max, 0.0))
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)""",
        r"""    weights = torch.softmax(scores, dim=-1)""",
    ),
]
