"""expected_speedup checks alpha and k but not c: a negative draft cost gives a speed-up instead of a ValueError.

Mutant of solutions/speculative.py for the speculative suite.
"""

EDITS = [
    (
        """    if not c >= 0:
        raise ValueError(f"c (a draft step's cost over a target step's) must be >= 0, got {c!r}")
""",
        "",
    ),
]
