"""The stop checker holds nothing back: the start of a stop string is shown before the stop string completes.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        hold = max((_overlap(self.text, s) for s in self.stop), default=0)""",
        r"""        hold = 0""",
    ),
]
