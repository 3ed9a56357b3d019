"""The running output is not rescaled when a tile raises the max: acc += p @ v without acc *= exp(m_old - m_new).

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""            acc = alpha * acc + p @ vg[..., j0:j1, :]""",
        r"""            acc = acc + p @ vg[..., j0:j1, :]""",
    ),
]
