"""The draft samples its proposals with torch's global random generator instead of the seeded one: the same seed gives other tokens on each call.

Mutant of solutions/speculative.py for the speculative suite.
"""

EDITS = [
    (
        """            tokens.append(int(torch.multinomial(q, 1, generator=gen)))""",
        """            tokens.append(int(torch.multinomial(q, 1)))""",
    ),
]
