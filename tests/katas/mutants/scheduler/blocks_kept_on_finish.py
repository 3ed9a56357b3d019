"""Forgets to free a finished request's blocks: the cache shrinks with every request served.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """    def _finish(self, request: _Request) -> Finished:
        self._drop(request)""",
        """    def _finish(self, request: _Request) -> Finished:
        held = request.blocks
        self._drop(request)
        self._free -= held""",
    ),
]
