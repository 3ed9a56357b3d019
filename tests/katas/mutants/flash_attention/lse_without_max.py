"""The log-sum-exp forgets the running max it was shifted by: lse = log(l) instead of m + log(l).

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        lse[..., i0:i1] = torch.where(l > 0, m + torch.log(l), float("-inf")).squeeze(-1)""",
        r"""        lse[..., i0:i1] = torch.where(l > 0, torch.log(l), float("-inf")).squeeze(-1)""",
    ),
]
