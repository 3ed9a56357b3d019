"""The chain adds the logit bias after the penalties, so the repetition penalty sees the unbiased sign.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    if logit_bias:
        chain.append(LogitBias(logit_bias))
    if repetition_penalty is not None:
        chain.append(RepetitionPenalty(repetition_penalty))
    if presence_penalty or frequency_penalty:
        chain.append(FrequencyPresencePenalty(presence_penalty, frequency_penalty))""",
        r"""    if repetition_penalty is not None:
        chain.append(RepetitionPenalty(repetition_penalty))
    if presence_penalty or frequency_penalty:
        chain.append(FrequencyPresencePenalty(presence_penalty, frequency_penalty))
    if logit_bias:
        chain.append(LogitBias(logit_bias))""",
    ),
]
