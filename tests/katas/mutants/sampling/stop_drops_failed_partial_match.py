"""The stop checker drops the held text when a partial match fails, instead of showing it.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        hold = max((_overlap(self.text, s) for s in self.stop), default=0)
        shown, self.text = self.text[: len(self.text) - hold], self.text[len(self.text) - hold :]""",
        r"""        held = getattr(self, "held", 0)
        hold = max((_overlap(self.text, s) for s in self.stop), default=0)
        if held and not any(s.startswith(self.text[:held + 1]) for s in self.stop):
            self.text = self.text[held:]  # the partial match failed: forget it
            hold = max((_overlap(self.text, s) for s in self.stop), default=0)
        self.held = hold
        shown, self.text = self.text[: len(self.text) - hold], self.text[len(self.text) - hold :]""",
    ),
]
