"""Reads key_padding_mask the way nn.MultiheadAttention does (True = ignore), but here True means a real key.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""        allowed = allowed & key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)""",
        r"""        allowed = allowed & ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)""",
    ),
]
