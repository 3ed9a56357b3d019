"""TPOT divides the time from the first token to the last by n, the tokens generated, instead of n - 1, the gaps between them.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """            (last - first) / (n - 1) if n > 1 else None,""",
        """            (last - first) / n if n > 1 else None,""",
    ),
]
