"""Divides the whole generation time by the number of tokens: the prefill leaks into TPOT.

Mutant of solutions/latency.py for the latency suite.
"""

EDITS = [
    (
        r"""            tpots.append((end - first) / (new_tokens - 1))""",
        r"""            tpots.append((end - start) / new_tokens)""",
    ),
]
