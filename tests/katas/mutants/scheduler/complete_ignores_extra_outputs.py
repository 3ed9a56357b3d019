"""complete checks that every sampling request has a token but not that each token belongs to one: a token for a request mid-prompt is silently dropped.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """        if missing or extra:""",
        """        if missing:""",
    ),
]
