"""The stop checker cuts at the first stop string in list order that occurs, not at the earliest occurrence.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r'            shown, self.text, self.pending = self.text[: min(starts)], "", b""',
        r'            shown, self.text, self.pending = self.text[: starts[0]], "", b""',
    ),
]
