"""The max is the current tile's, not the running one: m_new = max(tile) can fall, and exp(m_old - m_new) overflows.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))""",
        r"""            m_new = s.amax(dim=-1, keepdim=True)""",
    ),
]
