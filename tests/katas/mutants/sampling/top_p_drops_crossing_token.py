"""Top-p drops the token that crosses p: keeps tokens while the mass including them is below p (the top one kept).

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        mass_before = sorted_p.cumsum(dim=-1) - sorted_p""",
        r"""        mass_before = sorted_p.cumsum(dim=-1)
        mass_before[:, 0] = 0.0""",
    ),
]
