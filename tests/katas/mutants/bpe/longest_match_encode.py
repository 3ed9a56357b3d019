"""Encodes by greedy longest vocabulary match instead of applying merges by rank.

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""        if len(ids) > _LONG_CHUNK:
            return self._encode_long_chunk(ids)""",
        r"""        by_bytes = {v: k for k, v in self.vocab.items()}
        out, i = [], 0
        while i < len(data):  # bug: longest known token starting here, not merge order
            j = max(j for j in range(i + 1, len(data) + 1) if data[i:j] in by_bytes)
            out.append(by_bytes[data[i:j]])
            i = j
        return out""",
    ),
]
