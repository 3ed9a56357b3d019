"""Applies top-k and top-p before dividing by the temperature, so the temperature cannot change which tokens survive.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    logits = logits.float() / temperature""",
        r"""    logits = logits.float()""",
    ),
    (
        r"""        probs = probs.masked_fill(drop, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)""",
        r"""        probs = probs.masked_fill(drop, 0.0)
    probs = (probs.log() / temperature).softmax(dim=-1)
    return probs / probs.sum(dim=-1, keepdim=True)""",
    ),
]
