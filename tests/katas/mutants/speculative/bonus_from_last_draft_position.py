"""When every draft is accepted, draws the bonus from p at the last draft's position (p[k - 1]) instead of the position after it (p[k]).

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    p_next = p[rows, accepted]  # (B, V): p at the first rejected position, or the bonus position""",
        r"""    p_next = p[rows, accepted.clamp(max=max(k - 1, 0))]  # (B, V): p at the first rejected position""",
    ),
]
