"""Adds compute time and memory time: on the roofline they overlap, and the slower one alone sets the time.

Mutant of solutions/latency.py for the latency suite.
"""

EDITS = [
    (
        r"""    return max(cost.flops / peak_flops, cost.bytes / bandwidth)  # the slower resource sets the pace""",
        r"""    return cost.flops / peak_flops + cost.bytes / bandwidth  # the slower resource sets the pace""",
    ),
]
