"""Joins the chunks back together when counting, so merges cross chunk boundaries.

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""        chunks = Counter(self._splitter.findall(text) if self._splitter else [text])""",
        r"""        chunks = Counter([''.join(self._splitter.findall(text)) if self._splitter else text])""",
    ),
]
