"""Looks for inf but not NaN in the gradients, so a NaN step goes through and poisons the weights.

Mutant of solutions/mixed_precision.py for the mixed_precision suite.
"""

EDITS = [
    (
        r"""            finite = finite and bool(torch.isfinite(p.grad).all())""",
        r"""            finite = finite and not bool(torch.isinf(p.grad).any())""",
    ),
]
