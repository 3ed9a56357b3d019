"""Counts pairs without overlaps, like str.count: 'aaa' has one (a, a), not two.

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""            for pair, n in Counter(zip(joined, joined[1:])).items():""",
        r"""            for pair, n in _count_pairs(joined).items():""",
    ),
    (
        r"""
def bytes_to_unicode() -> dict[int, str]:""",
        r"""
def _count_pairs(seq) -> Counter:
    counts, i = Counter(), 0
    while i < len(seq) - 1:
        counts[(seq[i], seq[i + 1])] += 1
        i += 2 if seq[i] == seq[i + 1] else 1  # bug: skips the overlapping pair
    return counts


def bytes_to_unicode() -> dict[int, str]:""",
    ),
]
