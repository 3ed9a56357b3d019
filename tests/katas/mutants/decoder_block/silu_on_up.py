"""SwiGLU applies silu to the up projection instead of the gate.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T""",
        r"""    return ((x @ w_gate.T) * F.silu(x @ w_up.T)) @ w_down.T""",
    ),
]
