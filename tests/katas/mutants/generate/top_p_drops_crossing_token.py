"""Top-p also drops the token that crosses the threshold: keeps tokens while the mass including them is below top_p.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        mass_before = sorted_p.cumsum(dim=-1) - sorted_p  # the most probable token always has 0""",
        r"""        mass_before = sorted_p.cumsum(dim=-1)  # the most probable token always has 0""",
    ),
    (
        r"""        drop = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, mass_before >= top_p)
        probs = probs.masked_fill(drop, 0.0)""",
        r"""        drop = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, mass_before >= top_p)
        drop[torch.arange(len(drop)), order[:, 0]] = False
        probs = probs.masked_fill(drop, 0.0)""",
    ),
]
