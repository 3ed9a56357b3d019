"""abort does not check for a plan in flight: a request dropped between step() and complete() leaves the plan naming a request that is gone.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """        if self._plan is not None:
            raise RuntimeError("abort() while a plan is out: call it between complete() and step()")
""",
        "",
    ),
]
