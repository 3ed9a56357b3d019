"""The frequency and presence penalties count the prompt's tokens too (OpenAI's count only what was sampled).

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""            counts = Counter(output)""",
        r"""            counts = Counter(list(prompt_ids[row]) + list(output))""",
    ),
]
