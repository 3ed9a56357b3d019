"""Empties the target's cache every round and feeds it the whole sequence again: the right tokens, but each round recomputes the prompt and every kept token.

Mutant of solutions/speculative.py for the speculative suite.
"""

EDITS = [
    (
        """        fed = seq[target_cache.length :] + drafts
""",
        """        target_cache.truncate(0)
        fed = seq + drafts
""",
    ),
]
