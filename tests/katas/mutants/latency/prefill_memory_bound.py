"""Predicts prefill from its bytes alone, as for decode: a long prompt's prefill is compute-bound.

Mutant of solutions/latency.py for the latency suite.
"""

EDITS = [
    (
        r"""    return _roofline_seconds(phase_cost(config, "prefill", 1, prompt_len, 0, dtype), peak_flops, bandwidth)""",
        r"""    cost = phase_cost(config, "prefill", 1, prompt_len, 0, dtype)
    _roofline_seconds(cost, peak_flops, bandwidth)  # checks the ceilings
    return cost.bytes / bandwidth""",
    ),
]
