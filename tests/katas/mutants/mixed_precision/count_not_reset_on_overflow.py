"""Halves the scale on overflow but keeps counting good steps, so it regrows too soon.

Mutant of solutions/mixed_precision.py for the mixed_precision suite.
"""

EDITS = [
    (
        r"""            self.scale *= self.backoff_factor
            self.good_steps = 0
            return""",
        r"""            self.scale *= self.backoff_factor
            return""",
    ),
]
