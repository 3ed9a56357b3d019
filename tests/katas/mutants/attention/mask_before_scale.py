"""Adds the float mask before scaling, so the mask is shrunk by 1/sqrt(D) along with the scores.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""    scores = (q.float() @ k.float().transpose(-2, -1)) * scale  # (B, Hq, Tq, Tk), fp32 even for fp16 inputs""",
        r"""    scores = q.float() @ k.float().transpose(-2, -1)  # (B, Hq, Tq, Tk), fp32 even for fp16 inputs""",
    ),
    (
        r"""        scores = scores + attn_mask.float()""",
        r"""        scores = scores + attn_mask.float()
    scores = scores * scale""",
    ),
]
