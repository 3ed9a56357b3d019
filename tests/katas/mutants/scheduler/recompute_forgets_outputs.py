"""Recomputes a preempted request from its prompt alone, forgetting the tokens it generated: it repeats them.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """        self._running.remove(request)
        self._release(request)""",
        """        self._running.remove(request)
        self._release(request)
        del request.tokens[request.prompt_len + 1:]""",
    ),
]
