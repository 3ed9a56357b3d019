"""Sizes a decode's blocks by the positions before the new one, ceil((tokens - 1) / block_size): a decode that starts a block takes none.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """            need = self._blocks_for(len(request.tokens))""",
        """            need = self._blocks_for(len(request.tokens) - 1)""",
    ),
]
