"""Preempts the oldest running request instead of the newest: the request that waited longest loses its cache.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """                victim = self._running[-1]  # the newest""",
        """                victim = self._running[0]  # the oldest""",
    ),
]
