"""Ignores the stop token: a request that samples it runs on to max_new_tokens.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """            if token == request.stop_token or request.generated == request.max_new_tokens:""",
        """            if request.generated == request.max_new_tokens:""",
    ),
]
