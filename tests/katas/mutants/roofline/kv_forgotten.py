"""Forgets the KV cache: counts only the weights as decode's memory traffic, so long contexts look free.

Mutant of solutions/roofline.py for the roofline kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        bytes=c.n_layers * (kv_written + kv_read),""",
        r"""        bytes=0,""",
    ),
]
