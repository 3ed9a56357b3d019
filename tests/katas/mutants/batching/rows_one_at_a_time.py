"""Decodes the rows of a batch one at a time: 8 reads of the weights instead of one shared read.

Mutant of the batching reference; the rest of its docstring follows.
Batched decode: why a batch of 8 costs far less than 8 decode steps, and why it cannot grow forever.

A decode step reads every weight once, however many rows it serves, and does 2 FLOPs per weight
per row. At batch 1 it is bandwidth-bound (0.5 FLOP/byte in fp32), so extra rows ride along on the
same weight read almost for free: tokens/s grows nearly in proportion to the batch. Two things
stop it. The arithmetic catches up: at the `crossover_batch` the step's intensity reaches the
ridge and it turns compute-bound, after which tokens/s flattens. And memory runs out: every row
keeps its own KV cache, so `max_batch_size` sequences fit beside the weights. The KV cache also
adds bytes per row, so at long contexts decode may never become compute-bound at all.

Counting follows `solutions.roofline.phase_cost`. Left out: activations and logits (assumed
small beside weights and cache), allocator overhead, paged KV caches (vLLM's blocks waste less
than a contiguous `context_len` reservation per row), continuous batching and scheduling.
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
