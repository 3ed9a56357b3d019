"""Starts the clock before filling the cache: times the prefill of the context along with the step.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""    if context_len:
        model.prefill(ids[:, :context_len], cache)
""",
        r"""""",
    ),
    (
        r"""        cache.truncate(context_len)""",
        r"""        cache.truncate(0)""",
    ),
    (
        r"""        start = time.perf_counter()
        model.decode_step(ids[:, context_len], cache)  # (B,) -> (B, V)""",
        r"""        start = time.perf_counter()
        if context_len:
            model.prefill(ids[:, :context_len], cache)
        model.decode_step(ids[:, context_len], cache)  # (B,) -> (B, V)""",
    ),
]
