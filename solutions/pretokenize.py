"""Pre-tokenization: the split regexes (GPT-2, GPT-4, SmolLM2) and a faster `findall` for two of them.

Byte-level BPE first splits text into chunks with a regex, whose \\p{L} and \\p{N} need the `regex`
package. `Splitter.findall` gives exactly `regex.findall`'s chunks: it cuts the text into stretches
of about a thousand characters and splits each all-ASCII stretch with an ASCII twin of the pattern
in Python's faster `re`, any other with `regex` (tests/system/test_pretokenize.py checks it).
GPT-4's pattern has no twin here: it, and any other pattern, runs on `regex` alone.
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


class Splitter:
    """`findall(text)`: the chunks of `pattern` in text, as `regex.compile(pattern).findall`."""

    def __init__(self, pattern: str, stretch: int = 1024):
        """`stretch`: the fewest characters split at once, by `re` if they are all ASCII, else by
        `regex` (shorter stretches send less text to `regex`, in more calls). Raises regex.error
        for a pattern that does not compile and ValueError for a stretch below 1."""
        if isinstance(stretch, bool) or not isinstance(stretch, int) or stretch < 1:
            raise ValueError(f"stretch must be an int >= 1, got {stretch!r}")
        self.pattern, self.stretch = pattern, stretch
        self._slow = regex.compile(pattern)
        twin = ASCII_TWINS.get(pattern)
        self._fast = re.compile(twin) if twin is not None else None

    def findall(self, text: str) -> list[str]:
        fast, slow, stretch = self._fast, self._slow, self.stretch
        if fast is None:
            return slow.findall(text)
        if text.isascii():
            return fast.findall(text)
        chunks: list[str] = []
        start, n = 0, len(text)
        while start < n:
            end = _cut_after(text, start + stretch) if start + stretch < n else n
            engine = fast if text[start:end].isascii() else slow
            chunks += engine.findall(text, start, end)
            start = end
        return chunks


def _cut_after(text: str, pos: int) -> int:
    """The first cut at or after pos >= 1 (a "\n" after an ASCII character that isn't space), or
    the end of the text."""
    p = text.find("\n", pos)
    while p != -1 and not (text[p - 1].isascii() and not text[p - 1].isspace()):  # isspace() counts
        p = text.find("\n", p + 1)  # \x1c-\x1f too, which \s doesn't: fewer cuts, still safe
    return len(text) if p == -1 else p
