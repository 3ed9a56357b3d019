"""Forgets the 1/sqrt(D) scaling: scores grow with D and the softmax saturates.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""        scale = 1.0 / math.sqrt(d)  # a Python float keeps fp32 tensors fp32""",
        r"""        scale = 1.0""",
    ),
]
