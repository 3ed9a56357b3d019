"""The stop checker decodes each token's bytes on their own: a character split across tokens becomes U+FFFD.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        complete = _complete_prefix(data)""",
        r"""        complete = len(data)""",
    ),
]
