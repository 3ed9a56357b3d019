"""Loses the last partial chunk: range(0, T - chunk + 1, chunk) skips the tokens after the last full chunk.

Mutant of solutions/latency.py for the latency suite.
"""

EDITS = [
    (
        r"""    for lo in range(0, ids.shape[1], chunk):""",
        r"""    for lo in range(0, ids.shape[1] - chunk + 1, chunk):""",
    ),
]
