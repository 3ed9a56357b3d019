"""Aligns the causal mask top-left (j <= i): with a KV cache the Tq new queries are the last Tq positions, not the first.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""    return j <= i + (tk - tq)""",
        r"""    return j <= i""",
    ),
]
