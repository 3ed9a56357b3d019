"""merge_partials averages the partial outputs: every split weighs the same, whatever its log-sum-exp.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    weights = torch.exp(lses - top)  # (S, ...), the largest is 1""",
        r"""    weights = torch.isfinite(lses).float()  # (S, ...): 1 for each split that saw a key""",
    ),
]
