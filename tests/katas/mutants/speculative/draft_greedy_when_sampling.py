"""When sampling, the draft proposes its argmax instead of a draw from q, while verify is told the draft came from q.

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""            tokens.append(int(torch.multinomial(q, 1, generator=gen)))""",
        r"""            tokens.append(int(q.argmax()))""",
    ),
]
