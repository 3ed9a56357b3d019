"""Scales the whole step's bytes by the format ratio, as if the KV cache shrank with the weights: 6.4x at any context.

Mutant of solutions/int4.py for the int4 suite.
"""

EDITS = [
    (
        r"""    after = before - n * bytes_per_weight(key) + n * bytes_per_weight(to_fmt)""",
        r"""    after = before * bytes_per_weight(to_fmt) / bytes_per_weight(key)""",
    ),
]
