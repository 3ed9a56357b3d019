"""Top-p sorts probabilities ascending: the nucleus is built from the least probable tokens.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)  # (B, V)""",
        r"""        sorted_p, order = probs.sort(dim=-1, descending=False, stable=True)  # (B, V)""",
    ),
]
