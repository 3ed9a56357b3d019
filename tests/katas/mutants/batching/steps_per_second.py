"""Reports steps/s as throughput: a step of batch B yields B tokens, not one.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""    return {b: b / decode_step_time(model, b, context_len, repeats=repeats) for b in batch_sizes}""",
        r"""    return {b: 1 / decode_step_time(model, b, context_len, repeats=repeats) for b in batch_sizes}""",
    ),
]
