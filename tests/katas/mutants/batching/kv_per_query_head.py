"""Sizes the KV cache by query heads: grouped-query attention stores only the 3 KV heads, not 9.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * context_len * _itemsize(dtype)""",
        r"""    return 2 * config.n_layers * config.n_heads * config.head_dim * context_len * _itemsize(dtype)""",
    ),
]
