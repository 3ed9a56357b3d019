"""The repetition penalty looks at the output only, not the prompt (HF's input_ids hold both).

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""            seen = torch.tensor(sorted(set(prompt) | set(output)), dtype=torch.long)""",
        r"""            seen = torch.tensor(sorted(set(output)), dtype=torch.long)""",
    ),
]
