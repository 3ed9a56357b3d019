"""Rounds the batch up: a sequence that only partly fits is counted, and memory overflows.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""    fits = (memory_budget_bytes - weights) // per_seq""",
        r"""    fits = -(-(memory_budget_bytes - weights) // per_seq)""",
    ),
]
