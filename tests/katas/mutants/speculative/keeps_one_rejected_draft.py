"""Off by one in the accepted count: keeps the first rejected draft too (the prefix up to and including the first mismatch).

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""            while accepted < n_draft and drafts[accepted] == int(best[accepted]):
                accepted += 1
""",
        r"""            while accepted < n_draft and drafts[accepted] == int(best[accepted]):
                accepted += 1
            accepted = min(accepted + 1, n_draft)
""",
    ),
]
