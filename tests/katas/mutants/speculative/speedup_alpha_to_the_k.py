"""Expected tokens per round as (1 - alpha^k) / (1 - alpha): counts the accepted drafts but forgets the target's own token each round.

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)""",
        r"""    return float(k) if alpha == 1 else (1 - alpha ** k) / (1 - alpha)""",
    ),
]
