"""Predicts every decode step as if the cache were empty: a step also reads K and V of every cached position.

Mutant of solutions/latency.py for the latency suite.
"""

EDITS = [
    (
        r"""    return _roofline_seconds(phase_cost(config, "decode", 1, 1, context_len, dtype), peak_flops, bandwidth)""",
        r"""    return _roofline_seconds(phase_cost(config, "decode", 1, 1, 0, dtype), peak_flops, bandwidth)""",
    ),
]
