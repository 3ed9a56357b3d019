"""Top-k keeps exactly k token indices from topk: a token tied with the k-th is dropped.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        kth = logits.topk(self.k, dim=-1).values[:, -1:]  # (B, 1)
        return logits.masked_fill(logits < kth, float("-inf"))""",
        r"""        top = logits.topk(self.k, dim=-1)
        return torch.full_like(logits, float("-inf")).scatter(-1, top.indices, top.values)""",
    ),
]
