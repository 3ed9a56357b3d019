"""Top-p at p = 1 drops the tail of a real vocabulary: the fp32 running sum reaches 1 before the last tokens.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        if self.p == 1.0:  # subtle: an fp32 running sum of 49,152 probabilities can reach 1 before the tail
            return logits.clone()
""",
        r"""""",
    ),
]
