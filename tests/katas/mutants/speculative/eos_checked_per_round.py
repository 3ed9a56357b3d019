"""Checks for an EOS only after a round's tokens are all kept: tokens the round accepted after the EOS stay in the output (and are streamed).

Mutant of solutions/speculative.py for the speculative suite.
"""

EDITS = [
    (
        """            if on_token is not None:
                on_token(token)
            if token in eos:
                return SpeculativeResult(new, drafted, accepted_total, rounds)
""",
        """            if on_token is not None:
                on_token(token)
        if any(token in eos for token in drafts[:accepted] + [next_token]):
            return SpeculativeResult(new, drafted, accepted_total, rounds)
""",
    ),
]
