"""The repetition penalty multiplies every seen logit by the penalty: positive logits go up, not down.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""            logits[row, seen] = torch.where(z < 0, z * self.penalty, z / self.penalty)""",
        r"""            logits[row, seen] = z * self.penalty""",
    ),
]
