"""A row that has seen no key yet is shifted by its max of -inf: exp(-inf - -inf) is NaN for queries that see no key.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""            shift = torch.where(m_new == float("-inf"), 0.0, m_new)""",
        r"""            shift = m_new""",
    ),
]
