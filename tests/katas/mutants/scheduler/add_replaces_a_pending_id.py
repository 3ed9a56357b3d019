"""add does not check that the id is new: a second add of a pending id replaces its record while the first stays queued, so both are served under one id.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} is already pending")
""",
        "",
    ),
]
