"""Reports the total time of all repeats as the time of one step.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""    return statistics.median(times)""",
        r"""    return sum(times)""",
    ),
]
