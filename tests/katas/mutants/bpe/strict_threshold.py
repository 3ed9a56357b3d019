"""Stops when the best count equals the threshold: merges only pairs counted more than threshold times.

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""        heap = [(-c, a, b) for (a, b), c in counts.items() if c >= threshold]""",
        r"""        heap = [(-c, a, b) for (a, b), c in counts.items() if c > threshold]""",
    ),
    (
        r"""                if live >= threshold:""",
        r"""                if live > threshold:""",
    ),
    (
        r"""                if counts[pair] >= threshold:""",
        r"""                if counts[pair] > threshold:""",
    ),
]
