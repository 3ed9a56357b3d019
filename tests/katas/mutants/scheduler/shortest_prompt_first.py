"""Admits the shortest waiting prompt first for throughput: under steady load a long prompt starves.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """        candidates = [r for r in self._running if not r.decoding] + ([] if preempted else list(self._waiting))""",
        """        waiting = sorted(self._waiting, key=lambda r: len(r.tokens) - r.computed)
        candidates = [r for r in self._running if not r.decoding] + ([] if preempted else waiting)""",
    ),
    (
        """                self._running.append(request)  # waiting requests are all newer than running ones""",
        """                self._running.append(request)
                self._running.sort(key=lambda r: r.order)""",
    ),
]
