"""Calls a step exactly at the ridge memory-bound: at the ridge both ceilings meet, and it is compute-bound.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r'''        return bound(arithmetic_intensity(cost), peak_flops, bandwidth) == "compute"''',
        r"""        return arithmetic_intensity(cost) > ridge_point(peak_flops, bandwidth)""",
    ),
]
