"""Min-p compares logits with min_p * the largest logit, instead of probabilities with min_p * p_max.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        floor = self.min_p * probs.amax(dim=-1, keepdim=True)  # (B, 1)
        return logits.masked_fill(probs < floor, float("-inf"))""",
        r"""        floor = self.min_p * logits.amax(dim=-1, keepdim=True)  # (B, 1)
        return logits.masked_fill(logits < floor, float("-inf"))""",
    ),
]
