"""Checks the gradients for inf but never divides them by the scale: every update is scale times too big.

Mutant of solutions/mixed_precision.py for the mixed_precision suite.
"""

EDITS = [
    (
        r"""            p.grad.div_(self.scale)
""",
        r"""""",
    ),
]
