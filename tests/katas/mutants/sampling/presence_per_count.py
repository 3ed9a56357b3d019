"""The presence penalty is applied once per occurrence, like the frequency penalty, not once per token.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""            logits[row, ids] -= self.frequency * n + self.presence""",
        r"""            logits[row, ids] -= (self.frequency + self.presence) * n""",
    ),
]
