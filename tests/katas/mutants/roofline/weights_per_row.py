"""Charges every row of a batch its own pass over the weights, so decode intensity never grows with batch.

Mutant of solutions/roofline.py for the roofline kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""bytes=(matmul_params + norm_params + tokens * c.d_model) * size""",
        r"""bytes=(batch * (matmul_params + norm_params) + tokens * c.d_model) * size""",
    ),
]
