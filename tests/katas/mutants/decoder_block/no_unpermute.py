"""load keeps attn_q / attn_k in the file's order: rotate-half RoPE then turns the wrong pairs (the model still talks).

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        self.wq = unpermute(take(weights, p + "attn_q.weight", (c.n_heads * hd, d)), c.n_heads)
        self.wk = unpermute(take(weights, p + "attn_k.weight", (c.n_kv_heads * hd, d)), c.n_kv_heads)""",
        r"""        self.wq = take(weights, p + "attn_q.weight", (c.n_heads * hd, d))
        self.wk = take(weights, p + "attn_k.weight", (c.n_kv_heads * hd, d))""",
    ),
]
