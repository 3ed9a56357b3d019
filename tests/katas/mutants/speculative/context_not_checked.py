"""speculative_generate checks max_new_tokens >= 1 but not the prompt plus max_new_tokens against the models' context: the error comes later, from the cache, not naming max_new_tokens.

Mutant of solutions/speculative.py for the speculative suite.
"""

EDITS = [
    (
        """    if len(prompt) + max_new_tokens > context:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} after a {len(prompt)}-token prompt exceeds "
            f"the context of {context} tokens"
        )
""",
        "",
    ),
]
