"""Steps the optimizer even when the gradients overflowed: one inf step destroys the weights.

Mutant of solutions/mixed_precision.py for the mixed_precision suite.
"""

EDITS = [
    (
        r"""    if finite:
        optimizer.step()""",
        r"""    optimizer.step()""",
    ),
]
