"""Reports the total time of all repeats as the time of one pass.

Mutant of solutions/roofline.py for the roofline kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    return statistics.median(times)""",
        r"""    return sum(times)""",
    ),
]
