"""Stamps the first token when the first prefill chunk completes, not when the token is sampled: TTFT misses the later chunks.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """        for chunk in chunks:
            self._requests[chunk.request_id].computed = chunk.start + len(chunk.ids)""",
        """        for chunk in chunks:
            self._requests[chunk.request_id].computed = chunk.start + len(chunk.ids)
            if not self._requests[chunk.request_id].stamps:
                self._requests[chunk.request_id].stamps.append(float(now))""",
    ),
    (
        """            request.stamps.append(float(now))""",
        """            if request.generated > 1:
                request.stamps.append(float(now))""",
    ),
]
