"""Spends the whole budget on KV cache, as if the weights took no memory.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""    fits = (memory_budget_bytes - weights) // per_seq""",
        r"""    fits = memory_budget_bytes // per_seq""",
    ),
]
