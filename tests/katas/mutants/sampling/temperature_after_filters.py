"""The chain applies temperature after top-k, top-p and min-p: the filters read the unscaled probabilities.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    chain.append(Temperature(temperature))  # checks temperature even at 1.0, where it changes nothing
""",
        r"""""",
    ),
    (
        r"""        chain.append(MinP(min_p))
    return chain""",
        r"""        chain.append(MinP(min_p))
    chain.append(Temperature(temperature))
    return chain""",
    ),
]
