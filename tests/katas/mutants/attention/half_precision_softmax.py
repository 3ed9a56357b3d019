"""Computes scores and softmax in the input dtype: near 100, fp16 rounds scores to 1/16 and bf16 to 1/2.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""    scores = (q.float() @ k.float().transpose(-2, -1)) * scale  # (B, Hq, Tq, Tk), fp32 even for fp16 inputs""",
        r"""    scores = (q @ k.transpose(-2, -1)) * scale  # (B, Hq, Tq, Tk), fp32 even for fp16 inputs""",
    ),
    (
        r"""        scores = scores + attn_mask.float()""",
        r"""        scores = scores + attn_mask""",
    ),
    (
        r"""    return (weights @ v.float()).to(q.dtype)  # (B, Hq, Tq, D)""",
        r"""    return (weights @ v).to(q.dtype)  # (B, Hq, Tq, D)""",
    ),
]
