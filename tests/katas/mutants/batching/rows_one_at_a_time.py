"""Decodes the rows of a batch one at a time: 8 reads of the weights instead of one shared read.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""    cache = model.new_cache(batch_size, max_len=context_len + 1)
    if context_len:
        model.prefill(ids[:, :context_len], cache)""",
        r"""    row_caches = [model.new_cache(1, max_len=context_len + 1) for _ in range(batch_size)]
    for row, cache in enumerate(row_caches):
        if context_len:
            model.prefill(ids[row:row + 1, :context_len], cache)""",
    ),
    (
        r"""        cache.truncate(context_len)""",
        r"""        for cache in row_caches:
            cache.truncate(context_len)""",
    ),
    (
        r"""        model.decode_step(ids[:, context_len], cache)  # (B,) -> (B, V)""",
        r"""        for row in range(batch_size):  # one row per step
            model.decode_step(ids[row:row + 1, context_len], row_caches[row])""",
    ),
]
