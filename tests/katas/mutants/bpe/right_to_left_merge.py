"""Replaces a pair's occurrences right to left: 'aaa' becomes (a, aa) instead of (aa, a).

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""                positions.sort()  # overlapping runs merge left to right: "aaa" -> (aa, a)""",
        r"""                positions.sort(reverse=True)""",
    ),
    (
        r"""            i = rank.index(best)""",
        r"""            i = len(rank) - 1 - rank[::-1].index(best)""",
    ),
    (
        r"""        heap = [(ranks[pair], i) for i, pair in enumerate(zip(ids, ids[1:])) if pair in ranks]""",
        r"""        heap = [(ranks[pair], -i) for i, pair in enumerate(zip(ids, ids[1:])) if pair in ranks]""",
    ),
    (
        r"""            rank, i = heapq.heappop(heap)
            j = nxt[i]""",
        r"""            rank, i = heapq.heappop(heap)
            i = -i
            j = nxt[i]""",
    ),
    (
        r"""                    heapq.heappush(heap, (ranks[(new, ids[k])], i))""",
        r"""                    heapq.heappush(heap, (ranks[(new, ids[k])], -i))""",
    ),
    (
        r"""                heapq.heappush(heap, (ranks[(ids[p], new)], p))""",
        r"""                heapq.heappush(heap, (ranks[(ids[p], new)], -p))""",
    ),
]
