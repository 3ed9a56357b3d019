"""merge_partials weighs each partial by exp(lse_s) itself, not exp(lse_s - max lse): it overflows for lse near 1e3.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    top = torch.where(top == float("-inf"), 0.0, top)  # every partial blind: weights exp(-inf) = 0""",
        r"""    top = torch.zeros_like(top)  # weigh by exp(lse) itself""",
    ),
]
