"""Leaves the KV cache out of the crossover: counts the weights as the only bytes a step reads.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""        cost = phase_cost(config, "decode", batch, 1, context_len, dtype)""",
        r"""        cost = phase_cost(config, "decode", batch, 1, 0, dtype)""",
    ),
    (
        r"""    one, two = (phase_cost(config, "decode", b, 1, context_len, dtype) for b in (1, 2))""",
        r"""    one, two = (phase_cost(config, "decode", b, 1, 0, dtype) for b in (1, 2))""",
    ),
]
