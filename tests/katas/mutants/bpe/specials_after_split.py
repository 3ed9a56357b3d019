"""Splits with the pattern before cutting out special tokens, so '<|endoftext|>' is broken into pieces.

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""        parts = self._special_splitter.split(text) if self._special_splitter else [text]""",
        r"""        pieces = self._splitter.findall(text) if self._splitter else [text]
        parts = [p for piece in pieces for p in (self._special_splitter.split(piece) if self._special_splitter else [piece])]""",
    ),
]
