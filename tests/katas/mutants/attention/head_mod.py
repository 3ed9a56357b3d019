"""Maps query head h to kv head h % Hkv (tensor.repeat tiles the kv heads) instead of h // (Hq // Hkv).

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""    k = k.repeat_interleave(group, dim=1)  # (B, Hq, Tk, D): heads h*group .. h*group+group-1 share kv head h
    v = v.repeat_interleave(group, dim=1)  # (B, Hq, Tk, D)""",
        r"""    k = k.repeat(1, group, 1, 1)  # (B, Hq, Tk, D): heads h*group .. h*group+group-1 share kv head h
    v = v.repeat(1, group, 1, 1)  # (B, Hq, Tk, D)""",
    ),
]
