"""Starts every beam at score 0, so the first step fills the beams with copies of the same continuation.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    running_scores = torch.full((B, nb), float("-inf"))""",
        r"""    running_scores = torch.zeros((B, nb))""",
    ),
]
