"""Resumes a prefill chunk at the wrong offset: each chunk re-feeds the prompt from position 0 instead of from the computed count.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """                    tuple(request.tokens[request.computed : end]),""",
        """                    tuple(request.tokens[:n]),""",
    ),
]
