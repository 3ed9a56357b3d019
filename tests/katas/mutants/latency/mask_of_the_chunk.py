"""Passes each chunk only its own slice of the attention mask, not the cached positions before it.

Mutant of solutions/latency.py for the latency suite.
"""

EDITS = [
    (
        r"""        mask = None if attention_mask is None else attention_mask[:, : start + hi]  # cached + new so far""",
        r"""        mask = None if attention_mask is None else attention_mask[:, start + lo:start + hi]  # cached + new so far""",
    ),
]
