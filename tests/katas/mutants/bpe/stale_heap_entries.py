"""Trusts every heap entry: a pair whose count fell since it was pushed is merged with its old count.

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""            if live != -neg:
                if live >= threshold:
                    heapq.heappush(heap, (-live, a, b))""",
        r"""            if live < threshold:""",
    ),
]
