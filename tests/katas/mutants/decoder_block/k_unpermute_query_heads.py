"""Un-permutes K with the query head count: K has n_kv_heads heads, so its rows are regrouped wrongly.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""(c.n_kv_heads * hd, d)), c.n_kv_heads)""",
        r"""(c.n_kv_heads * hd, d)), c.n_heads)""",
    ),
]
