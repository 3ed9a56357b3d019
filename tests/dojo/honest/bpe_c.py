"""Byte-level BPE tokenizer (train / encode / decode / save / load)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable

import regex

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)

_HEADER = "bpe v1"
_MERGE_RE = re.compile(r"merge[ \t]+([0-9]+)[ \t]+([0-9]+)")
_SPECIAL_RE = re.compile(r"special[ \t]+([0-9]+)[ \t]+(.+)")
_PATTERN_RE = re.compile(r"pattern[ \t]+(.+)")


class BPEFormatError(ValueError):
    def __init__(self, lineno: int, what: str):
        super().__init__(f"line {lineno}: {what}")


def apply_merge(seq: tuple[int, ...], left: int, right: int, new: int) -> tuple[int, ...]:
    result = []
    k = 0
    while k < len(seq):
        if k < len(seq) - 1 and seq[k] == left and seq[k + 1] == right:
            result.append(new)
            k += 2
        else:
            result.append(seq[k])
            k += 1
    return tuple(result)


class BPETokenizer:
    """Byte-level BPE. Ids 0..255 are the bytes; the i-th merge creates id 256 + i."""

    def __init__(self, pattern: str | None = None, special_tokens: dict[str, int] | None = None):
        self.pattern = pattern
        self.special_tokens: dict[str, int] = dict(special_tokens or {})
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {b: bytes([b]) for b in range(256)}
        self._check_specials()

    def _check_specials(self) -> None:
        owners: dict[int, str] = {}
        for name, tid in self.special_tokens.items():
            if not isinstance(name, str) or name == "":
                raise ValueError(f"special token names must be non-empty strings: {name!r}")
            if type(tid) is not int and not hasattr(tid, "__index__"):
                raise ValueError(f"special token {name!r}: id {tid!r} is not an int")
            tid = int(tid)
            self.special_tokens[name] = tid
            if tid < 0:
                raise ValueError(f"special token {name!r}: negative id {tid}")
            if tid in self.vocab:
                raise ValueError(f"special token {name!r}: id {tid} already belongs to the vocab")
            if tid in owners:
                raise ValueError(f"special tokens {owners[tid]!r} and {name!r} share id {tid}")
            owners[tid] = name

    def _split(self, text: str) -> list[str]:
        if self.pattern is None:
            return [text] if text else []
        return regex.findall(self.pattern, text)

    # ------------------------------------------------------------------ training
    def train(self, text: str, threshold: int = 2, max_merges: int | None = None) -> None:
        if threshold < 1:
            raise ValueError(f"threshold must be at least 1 (got {threshold})")
        if max_merges is not None and max_merges < 0:
            raise ValueError(f"max_merges must be non-negative (got {max_merges})")
        reserved = set(self.special_tokens.values())

        # identical chunks behave identically: keep one copy with a multiplicity
        words: dict[tuple[int, ...], int] = defaultdict(int)
        for piece in self._split(text):
            words[tuple(piece.encode("utf-8"))] += 1

        merges: dict[tuple[int, int], int] = {}
        vocab = {b: bytes([b]) for b in range(256)}
        limit = float("inf") if max_merges is None else max_merges
        while len(merges) < limit:
            stats: dict[tuple[int, int], int] = defaultdict(int)
            for word, mult in words.items():
                for a, b in zip(word, word[1:]):
                    stats[(a, b)] += mult
            if not stats:
                break
            top = max(stats.values())
            if top < threshold:
                break
            best = min(p for p, c in stats.items() if c == top)
            new = 256 + len(merges)
            if new in reserved:
                raise ValueError(f"merge {best} would create id {new}, already used by a special token")
            merges[best] = new
            vocab[new] = vocab[best[0]] + vocab[best[1]]
            merged: dict[tuple[int, ...], int] = defaultdict(int)
            for word, mult in words.items():
                merged[apply_merge(word, best[0], best[1], new)] += mult
            words = merged

        self.merges, self.vocab = merges, vocab

    # ------------------------------------------------------------------ encoding
    def _bpe(self, piece: str) -> list[int]:
        seq = tuple(piece.encode("utf-8"))
        # replay the merges in training order, skipping those that cannot apply
        for (a, b), new in self.merges.items():
            if len(seq) < 2:
                break
            if any(x == a and y == b for x, y in zip(seq, seq[1:])):
                seq = apply_merge(seq, a, b, new)
        return list(seq)

    def _segments(self, text: str):
        """Yield (is_special, string) pieces; at a position, the longest special token wins."""
        specials = sorted(self.special_tokens, key=len, reverse=True)
        start = 0
        i = 0
        while i < len(text):
            hit = next((s for s in specials if text.startswith(s, i)), None)
            if hit is None:
                i += 1
                continue
            if start < i:
                yield False, text[start:i]
            yield True, hit
            i += len(hit)
            start = i
        if start < len(text):
            yield False, text[start:]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for is_special, piece in self._segments(text):
            if is_special:
                ids.append(self.special_tokens[piece])
            else:
                for chunk in self._split(piece):
                    ids += self._bpe(chunk)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        special_bytes = {tid: name.encode("utf-8") for name, tid in self.special_tokens.items()}
        buf = bytearray()
        for tid in ids:
            piece = self.vocab.get(tid)
            if piece is None:
                piece = special_bytes.get(tid)
            if piece is None:
                raise ValueError(f"unknown token id {tid}")
            buf += piece
        return bytes(buf).decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ files
    def save(self, path) -> None:
        out = [_HEADER, f"pattern {json.dumps(self.pattern)}"]
        out += [f"special {tid} {json.dumps(name)}" for name, tid in self.special_tokens.items()]
        ordered = sorted(self.merges, key=self.merges.__getitem__)
        out += [f"merge {a} {b}" for a, b in ordered]
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write("\n".join(out) + "\n")

    @classmethod
    def load(cls, path) -> BPETokenizer:
        with open(path, encoding="utf-8", errors="strict", newline="") as fh:
            try:
                content = fh.read()
            except UnicodeDecodeError as exc:
                raise ValueError(f"line 1: file is not UTF-8 ({exc})") from None
        # an editor counts \n, \r\n and \r as line ends (not str.splitlines' exotic ones)
        lines = re.split(r"\r\n|\r|\n", content)
        if content.endswith(("\n", "\r")):
            lines = lines[:-1]

        if len(lines) < 1 or lines[0].rstrip() != _HEADER:
            raise BPEFormatError(1, f"expected {_HEADER!r}")
        if len(lines) < 2:
            raise BPEFormatError(2, "missing the pattern line")
        m = _PATTERN_RE.fullmatch(lines[1].strip())
        if m is None:
            raise BPEFormatError(2, "expected 'pattern <JSON string or null>'")
        try:
            pattern = json.loads(m.group(1))
        except ValueError:
            raise BPEFormatError(2, "the pattern is not valid JSON") from None
        if not (pattern is None or isinstance(pattern, str)):
            raise BPEFormatError(2, "the pattern must be a string or null")
        if pattern is not None:
            try:
                regex.compile(pattern)
            except Exception as exc:
                raise BPEFormatError(2, f"the pattern is not a valid regex: {exc}") from None

        specials: dict[str, int] = {}
        merge_list: list[tuple[int, int]] = []
        for lineno, raw in enumerate(lines[2:], 3):
            line = raw.strip()
            if not line:
                continue
            if line.startswith("merge"):
                m = _MERGE_RE.fullmatch(line)
                if m is None:
                    raise BPEFormatError(lineno, "expected 'merge <left> <right>'")
                a, b = int(m.group(1)), int(m.group(2))
                new = 256 + len(merge_list)
                if max(a, b) >= new:
                    raise BPEFormatError(lineno, f"merge {a} {b} refers to an id not yet created")
                if (a, b) in merge_list:
                    raise BPEFormatError(lineno, f"merge {a} {b} appears twice")
                if new in specials.values():
                    raise BPEFormatError(lineno, f"merge would create id {new}, held by a special token")
                merge_list.append((a, b))
            elif line.startswith("special"):
                m = _SPECIAL_RE.fullmatch(line)
                if m is None:
                    raise BPEFormatError(lineno, "expected 'special <id> <JSON string>'")
                tid = int(m.group(1))
                try:
                    name = json.loads(m.group(2))
                except ValueError:
                    raise BPEFormatError(lineno, "special token is not a valid JSON string") from None
                if not isinstance(name, str) or not name:
                    raise BPEFormatError(lineno, "special token must be a non-empty string")
                if name in specials:
                    raise BPEFormatError(lineno, f"special token {name!r} given twice")
                if tid < 256 + len(merge_list) or tid in specials.values():
                    raise BPEFormatError(lineno, f"id {tid} is already taken")
                specials[name] = tid
            else:
                raise BPEFormatError(lineno, f"unrecognised line {line!r}")

        try:
            tok = cls(pattern, specials)
        except ValueError as exc:  # pragma: no cover - checked above
            raise BPEFormatError(2, str(exc)) from None
        for i, (a, b) in enumerate(merge_list):
            tok.merges[(a, b)] = 256 + i
            tok.vocab[256 + i] = tok.vocab[a] + tok.vocab[b]
        return tok
