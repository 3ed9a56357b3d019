"""Leaves the EOS out of the length in the length penalty: a hypothesis ending in EOS is divided by one token fewer.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        penalised = (cand_scores[:, :nb] / (step + 1) ** length_penalty).tolist()""",
        r"""        penalised = (cand_scores[:, :nb] / (step + 1 - ends[:, :nb].long() + (step == max_new_tokens - 1)).clamp(min=1) ** length_penalty).tolist()""",
    ),
]
