"""Breaks count ties toward the largest pair instead of the smallest.

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""        heap = [(-c, a, b) for (a, b), c in counts.items() if c >= threshold]""",
        r"""        heap = [(-c, -a, -b) for (a, b), c in counts.items() if c >= threshold]""",
    ),
    (
        r"""            neg, a, b = heapq.heappop(heap)
            live = counts.get((a, b), 0)""",
        r"""            neg, a, b = heapq.heappop(heap)
            a, b = -a, -b
            live = counts.get((a, b), 0)""",
    ),
    (
        r"""                    heapq.heappush(heap, (-live, a, b))""",
        r"""                    heapq.heappush(heap, (-live, -a, -b))""",
    ),
    (
        r"""                    heapq.heappush(heap, (-counts[pair], *pair))""",
        r"""                    heapq.heappush(heap, (-counts[pair], -pair[0], -pair[1]))""",
    ),
]
