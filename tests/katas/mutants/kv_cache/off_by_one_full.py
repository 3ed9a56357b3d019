"""Refuses the write that exactly fills the cache (end >= max_len): a cache of max_len positions holds max_len - 1.

Mutant of solutions/kv_cache.py for the kv_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        if end > self.max_len:""",
        r"""        if end >= self.max_len:""",
    ),
]
