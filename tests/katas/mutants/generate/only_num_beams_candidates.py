"""Ranks only num_beams candidates per step, so a beam that ends with EOS leaves a dead beam running.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    n_candidates = max(2, 1 + len(eos)) * nb  # enough that nb candidates without EOS always remain""",
        r"""    n_candidates = nb  # enough that nb candidates without EOS always remain""",
    ),
]
