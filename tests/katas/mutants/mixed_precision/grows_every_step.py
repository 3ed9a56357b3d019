"""Never resets the good-step count after growing: past growth_interval the scale doubles on every step.

Mutant of solutions/mixed_precision.py for the mixed_precision suite.
"""

EDITS = [
    (
        r"""        if self.good_steps == self.growth_interval:""",
        r"""        if self.good_steps >= self.growth_interval:""",
    ),
    (
        r"""            self.scale *= self.growth_factor
            self.good_steps = 0""",
        r"""            self.scale *= self.growth_factor""",
    ),
]
