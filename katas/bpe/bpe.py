"""Byte-level BPE tokenizer: train, encode, decode, save, load.

Your task: text is UTF-8 bytes, ids 0..255 are the bytes, and training keeps merging the most
frequent adjacent pair into a new id (256, 257, ...) while its count is at least the threshold.
Encoding replays the merges; decoding maps ids back to text. Use the `regex` package for split
patterns; tokenizer libraries are off limits. The prompt is the contract (`dojo start bpe` prints
it; in a notebook it is the first cell).
"""

from __future__ import annotations

from collections.abc import Iterable

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)


class BPETokenizer:
    """Byte-level BPE. Ids 0..255 are the bytes; the i-th merge creates id 256 + i.

    Attributes:
        pattern: the split regex (for the `regex` package), or None for no split.
        special_tokens: special token text -> id.
        merges: (left id, right id) -> new id, in training order.
        vocab: id -> bytes, for the 256 bytes and every merged token (not the special tokens).
    """

    def __init__(self, pattern: str | None = None, special_tokens: dict[str, int] | None = None):
        """An untrained tokenizer: vocab holds the 256 bytes, merges is empty.

        Raises ValueError for a special token whose id is already taken: by a byte (0..255) or by
        another special token.
        """
        self.pattern = pattern
        self.special_tokens: dict[str, int] = dict(special_tokens or {})
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {}
        raise NotImplementedError("BPETokenizer.__init__")

    def train(self, text: str, threshold: int = 2, max_merges: int | None = None) -> None:
        """Learn merges on `text`, starting afresh from the 256 byte tokens.

        Split `text` into chunks with the pattern (if any); count every adjacent pair inside each
        chunk, overlaps included; merge the most frequent pair (ties: the smallest (left, right))
        while its count is >= threshold, replacing occurrences left to right without overlap.
        Stop after `max_merges` merges or when no pair is left. Special tokens are not looked for.

        Raises ValueError if threshold < 1, max_merges < 0, or a merge would create an id that a
        special token holds.
        """
        raise NotImplementedError("BPETokenizer.train")

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`: special tokens whole (the longest at a position wins), the rest
        split by the pattern, and each chunk's bytes merged by rank, earliest merge first."""
        raise NotImplementedError("BPETokenizer.encode")

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`; bytes that are not valid UTF-8 become U+FFFD (errors="replace").

        Raises ValueError naming the first id that is neither a token nor a special token.
        """
        raise NotImplementedError("BPETokenizer.decode")

    def save(self, path) -> None:
        """Write the tokenizer to `path` in the text format that the prompt documents ("Files")."""
        raise NotImplementedError("BPETokenizer.save")

    @classmethod
    def load(cls, path) -> BPETokenizer:
        """Read a file written by save (format in the prompt, "Files").

        Raises ValueError naming the line ("line 4: ...") of a malformed file.
        """
        raise NotImplementedError("BPETokenizer.load")
