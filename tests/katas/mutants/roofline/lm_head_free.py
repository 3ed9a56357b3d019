"""Treats the tied LM head as free: the embedding matrix is shared, but the head still reads all of it every pass.

Mutant of solutions/roofline.py for the roofline kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    norm_params = (2 * c.n_layers + 1) * c.d_model""",
        r"""    norm_params = (2 * c.n_layers + 1) * c.d_model - c.vocab_size * c.d_model  # the head is the embedding""",
    ),
]
