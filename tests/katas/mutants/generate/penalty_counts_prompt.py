"""Length-penalises by the whole sequence, prompt included, instead of the new tokens only.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        penalised = (cand_scores[:, :nb] / (step + 1) ** length_penalty).tolist()""",
        r"""        penalised = (cand_scores[:, :nb] / (T + step + 1) ** length_penalty).tolist()""",
    ),
]
