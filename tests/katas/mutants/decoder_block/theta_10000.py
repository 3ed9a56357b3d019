"""Hard-codes RoPE's theta to 10000 (the RoFormer default) instead of config.rope_theta (100000 for SmolLM2).

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)""",
        r"""        q, k = rope(q, positions, 10000.0), rope(k, positions, 10000.0)""",
    ),
]
