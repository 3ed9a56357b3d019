"""Forgets the bonus token: when every draft is accepted, the round adds no token of the target's, so it yields k tokens, not k + 1.

Mutant of solutions/speculative.py for the speculative kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""        for token in drafts[:accepted] + [next_token]:""",
        r"""        for token in drafts[:accepted] + ([next_token] if accepted < n_draft or n_draft == 0 else []):""",
    ),
    (
        r"""        kept = len(seq) + accepted  # positions both caches may keep: all but next_token""",
        r"""        kept = len(seq) + accepted - (accepted == n_draft > 0)  # the last accepted draft is the next to feed""",
    ),
]
