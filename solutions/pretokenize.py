"""Pre-tokenization: the split regexes (GPT-2, GPT-4, SmolLM2) and a faster `findall` for two of them.

Byte-level BPE first splits text into chunks with a regex; \\p{L} and \\p{N} need the `regex`
package. That split was about 45% of encoding with SmolLM2's vocabulary here, and Python's own
`re` runs an ASCII twin of the pattern about twice as fast. `Splitter.findall` gives exactly
`regex.findall`'s chunks, using the twin on the ASCII stretches of the text and `regex` on the
stretches around any other character. It rests on two facts, both checked against `regex` on
random text by tests/system/test_pretokenize.py:

- The twin: on ASCII text, \\p{L} is A-Z a-z, \\p{N} is 0-9 and \\s is \\t \\n \\v \\f \\r and the
  space (as `regex` defines them), so the twin, which spells these out, finds the same chunks.
- The cut: a stretch may end just before a "\\n" that follows an ASCII character other than
  whitespace. In the GPT-2 and SmolLM2 patterns a chunk holding "\\n" is all whitespace, so no
  chunk spans that point; nothing looks behind, and the one lookahead, at the end of a whitespace
  run, never reaches the cut. So splitting the stretches one by one finds the whole text's chunks.

Left out: GPT-4's pattern has no twin here (its `[^\\s\\p{L}\\p{N}]++[\\r\\n]*` keeps ".\\n" as one
chunk, which breaks the cut), and any other pattern runs on `regex` alone.
"""

from __future__ import annotations

import re

import regex

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)
# SmolLM2's: GPT-2's split with every \p{N} character on its own: a space before a digit stays
# alone, and a whitespace run ends where a digit starts, as if the digit ended the text.
SMOLLM_PATTERN = r"""\p{N}|'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""

_S = r"\t\n\x0b\x0c\r "  # \s on ASCII
ASCII_TWINS = {
    GPT2_PATTERN: rf"""'(?:[sdmt]|ll|ve|re)| ?[A-Za-z]+| ?[0-9]+| ?[^{_S}A-Za-z0-9]+|[{_S}]+(?![^{_S}])|[{_S}]+""",
    SMOLLM_PATTERN: rf"""[0-9]|'(?:[sdmt]|ll|ve|re)| ?[A-Za-z]+| ?[^{_S}A-Za-z0-9]+|[{_S}]+(?![^{_S}0-9])|[{_S}]+""",
}
_NOT_ASCII = re.compile(r"[^\x00-\x7f]+")


class Splitter:
    """`findall(text)`: the chunks of `pattern` in text, as `regex.compile(pattern).findall`."""

    def __init__(self, pattern: str):
        """Raises regex.error for a pattern that does not compile."""
        self.pattern = pattern
        self._slow = regex.compile(pattern)
        twin = ASCII_TWINS.get(pattern)
        self._fast = re.compile(twin) if twin is not None else None

    def findall(self, text: str) -> list[str]:
        fast, slow = self._fast, self._slow
        if fast is None:
            return slow.findall(text)
        if text.isascii():
            return fast.findall(text)
        chunks: list[str] = []
        done = 0  # text[:done] is split
        for run in _NOT_ASCII.finditer(text):
            if run.start() < done:
                continue  # inside the last stretch given to `regex`
            lo, hi = _cut_before(text, run.start(), done), _cut_after(text, run.end())
            chunks += fast.findall(text, done, lo)
            chunks += slow.findall(text, lo, hi)
            done = hi
        chunks += fast.findall(text, done)
        return chunks


def _is_cut(text: str, p: int) -> bool:
    """Whether a stretch may end at p: text[p] is "\\n" after an ASCII character that isn't space."""
    c = text[p - 1]
    return c.isascii() and not c.isspace()  # isspace() counts \x1c-\x1f too: fewer cuts, still safe


def _cut_before(text: str, pos: int, floor: int) -> int:
    """The last cut in (floor, pos], or floor (where the previous stretch ended)."""
    p = text.rfind("\n", floor + 1, pos + 1)
    while p > floor and not _is_cut(text, p):
        p = text.rfind("\n", floor + 1, p)
    return max(p, floor)


def _cut_after(text: str, pos: int) -> int:
    """The first cut at or after pos, or the end of the text."""
    p = text.find("\n", max(pos, 1))
    while p != -1 and not _is_cut(text, p):
        p = text.find("\n", p + 1)
    return len(text) if p == -1 else p
