"""After a rejection, draws the replacement from the target's p instead of the residual max(0, p - q): tokens the draft also proposes come out too often.

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    residual = (p_next - q_next).clamp(min=0)  # the bonus position: p itself""",
        r"""    residual = p_next""",
    ),
]
