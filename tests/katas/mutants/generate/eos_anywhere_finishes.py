"""Lets an EOS anywhere among the 2 * num_beams candidates finish a hypothesis, not only in the top num_beams.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        penalised = (cand_scores[:, :nb] / (step + 1) ** length_penalty).tolist()""",
        r"""        penalised = (cand_scores / (step + 1) ** length_penalty).tolist()""",
    ),
    (
        r"""            for j in range(nb):""",
        r"""            for j in range(n_candidates):""",
    ),
]
