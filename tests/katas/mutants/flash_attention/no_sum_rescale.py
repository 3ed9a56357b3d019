"""The running sum is not rescaled when a tile raises the max: l += rowsum(p) without l *= exp(m_old - m_new).

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""            l = alpha * l + p.sum(dim=-1, keepdim=True)  # noqa: E741""",
        r"""            l = l + p.sum(dim=-1, keepdim=True)  # noqa: E741""",
    ),
]
