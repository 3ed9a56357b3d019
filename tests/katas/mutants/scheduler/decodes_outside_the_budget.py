"""Counts only prefill tokens against the step's token budget: the decodes ride along for free and a step runs over.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """            decodes.append(Chunk(request.id, len(request.tokens) - 1, (request.tokens[-1],), True))
            budget -= 1""",
        """            decodes.append(Chunk(request.id, len(request.tokens) - 1, (request.tokens[-1],), True))""",
    ),
]
