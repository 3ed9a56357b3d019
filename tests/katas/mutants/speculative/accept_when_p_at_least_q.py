"""Accepts a draft only when p(x) >= q(x), and always then: no coin flip with probability p / q, so drafts the draft over-proposes are never kept.

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    ok = (u < ratio).long()  # (B, k)""",
        r"""    ok = (ratio >= 1).long()  # (B, k)""",
    ),
]
