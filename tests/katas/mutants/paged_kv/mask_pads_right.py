"""The batch view's attention_mask marks the first num_tokens + new_tokens columns of a row as real (padding on the right), while update left-pads the keys.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        "        return torch.arange(int(lens.max()) + new_tokens)[None] >= pad[:, None]",
        "        return torch.arange(int(lens.max()) + new_tokens)[None] < (lens + new_tokens)[:, None]",
    ),
]
