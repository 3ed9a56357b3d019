"""acceptance_probability as 1 - sum|p - q|: the total variation distance without its half, so p and q sharing half their mass give 0, not 0.5.

Mutant of solutions/speculative.py for the speculative suite.
"""

EDITS = [
    (
        """    return float(torch.minimum(p.double(), q.double()).sum())""",
        """    return float(1 - (p.double() - q.double()).abs().sum())""",
    ),
]
