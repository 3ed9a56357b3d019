"""Skips the final RMSNorm (output_norm) before the tied LM head.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        return rms_norm(x, self.norm, self.config.norm_eps) @ self.embed.T  # (B, T, V)""",
        r"""        return x @ self.embed.T  # (B, T, V)""",
    ),
]
