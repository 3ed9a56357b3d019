"""A request that generates a single token gets tpot 0.0 instead of None: there is no time per output token after the first to report.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """            (last - first) / (n - 1) if n > 1 else None,""",
        """            (last - first) / max(n - 1, 1),""",
    ),
]
