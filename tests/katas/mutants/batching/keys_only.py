"""Forgets the values: the KV cache holds K and V, two tensors per layer, not one.

Mutant of solutions/batching.py for the batching suite.
"""

EDITS = [
    (
        r"""    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * context_len * _itemsize(dtype)""",
        r"""    return config.n_layers * config.n_kv_heads * config.head_dim * context_len * _itemsize(dtype)""",
    ),
]
