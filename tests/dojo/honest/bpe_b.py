"""Byte-level BPE tokenizer: train, encode, decode, save, load."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

import regex

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)


def _count_pairs(chunks: list[list[int]]) -> Counter:
    counts: Counter = Counter()
    for ids in chunks:
        for pair in zip(ids, ids[1:]):
            counts[pair] += 1
    return counts


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace occurrences of `pair` left to right, without overlap."""
    out: list[int] = []
    i = 0
    n = len(ids)
    while i < n:
        if i + 1 < n and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class BPETokenizer:
    """Byte-level BPE. Ids 0..255 are the bytes; the i-th merge creates id 256 + i."""

    def __init__(self, pattern: str | None = None, special_tokens: dict[str, int] | None = None):
        if pattern is not None and not isinstance(pattern, str):
            raise ValueError(f"pattern must be a str or None, got {type(pattern).__name__}")
        self.pattern = pattern
        self.special_tokens: dict[str, int] = {}
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}
        seen: dict[int, str] = {}
        for text, idx in dict(special_tokens or {}).items():
            if not isinstance(text, str) or not text:
                raise ValueError(f"special token must be a non-empty str, got {text!r}")
            if not _is_int(idx) or idx < 0:
                raise ValueError(f"special token {text!r} has invalid id {idx!r}")
            if idx < 256:
                raise ValueError(f"special token {text!r}: id {idx} is taken by a byte")
            if idx in seen:
                raise ValueError(f"special token {text!r}: id {idx} is taken by {seen[idx]!r}")
            seen[idx] = text
            self.special_tokens[text] = idx

    # ------------------------------------------------------------------ helpers
    def _chunks(self, text: str) -> list[str]:
        if self.pattern is None:
            return [text] if text else []
        return regex.findall(self.pattern, text)

    def _special_ids(self) -> set[int]:
        return set(self.special_tokens.values())

    # ------------------------------------------------------------------ train
    def train(self, text: str, threshold: int = 2, max_merges: int | None = None) -> None:
        if not isinstance(text, str):
            raise ValueError("text must be a str")
        if threshold < 1:
            raise ValueError(f"threshold must be >= 1, got {threshold}")
        if max_merges is not None and max_merges < 0:
            raise ValueError(f"max_merges must be >= 0, got {max_merges}")

        chunks = [list(c.encode("utf-8")) for c in self._chunks(text)]
        merges: dict[tuple[int, int], int] = {}
        vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}
        special_ids = self._special_ids()

        while max_merges is None or len(merges) < max_merges:
            counts = _count_pairs(chunks)
            if not counts:
                break
            pair, count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            if count < threshold:
                break
            new_id = 256 + len(merges)
            if new_id in special_ids:
                raise ValueError(f"merge {pair} would create id {new_id}, which a special token holds")
            merges[pair] = new_id
            vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
            chunks = [_merge(c, pair, new_id) for c in chunks]

        self.merges = merges
        self.vocab = vocab

    # ------------------------------------------------------------------ encode
    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            ranked = [(self.merges[p], p) for p in zip(ids, ids[1:]) if p in self.merges]
            if not ranked:
                break
            new_id, pair = min(ranked)
            ids = _merge(ids, pair, new_id)
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk in self._chunks(text):
            out.extend(self._encode_chunk(chunk))
        return out

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ValueError("text must be a str")
        if not self.special_tokens:
            return self._encode_ordinary(text)
        # longest first, so at a given position the longest special token wins
        alternatives = sorted(self.special_tokens, key=len, reverse=True)
        special_re = regex.compile("|".join(regex.escape(s) for s in alternatives))
        out: list[int] = []
        pos = 0
        for m in special_re.finditer(text):
            out.extend(self._encode_ordinary(text[pos : m.start()]))
            out.append(self.special_tokens[m.group()])
            pos = m.end()
        out.extend(self._encode_ordinary(text[pos:]))
        return out

    # ------------------------------------------------------------------ decode
    def decode(self, ids: Iterable[int]) -> str:
        by_id = {i: s.encode("utf-8") for s, i in self.special_tokens.items()}
        parts: list[bytes] = []
        for raw in ids:
            try:
                i = int(raw)
            except (TypeError, ValueError):
                raise ValueError(f"unknown token id {raw!r}") from None
            if i != raw:
                raise ValueError(f"unknown token id {raw!r}")
            if i in self.vocab:
                parts.append(self.vocab[i])
            elif i in by_id:
                parts.append(by_id[i])
            else:
                raise ValueError(f"unknown token id {i}")
        return b"".join(parts).decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ files
    def save(self, path) -> None:
        lines = ["bpe v1", "pattern " + json.dumps(self.pattern)]
        for text, idx in self.special_tokens.items():
            lines.append(f"special {idx} {json.dumps(text)}")
        for (left, right), _new in sorted(self.merges.items(), key=lambda kv: kv[1]):
            lines.append(f"merge {left} {right}")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines) + "\n")

    @classmethod
    def load(cls, path) -> BPETokenizer:
        with open(path, "rb") as f:
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line_no = data[: e.start].count(b"\n") + 1
            raise ValueError(f"line {line_no}: not valid UTF-8") from None
        lines = text.split("\n")
        lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]

        def bad(n: int, why: str) -> ValueError:
            return ValueError(f"line {n}: {why}")

        if not lines or lines[0].strip() != "bpe v1":
            raise bad(1, f"expected 'bpe v1', got {lines[0] if lines else ''!r}")
        if len(lines) < 2:
            raise bad(2, "missing 'pattern' line")
        head, _, rest = lines[1].strip().partition(" ")
        if head != "pattern" or not rest.strip():
            raise bad(2, f"expected 'pattern <json string or null>', got {lines[1]!r}")
        try:
            pattern = json.loads(rest)
        except json.JSONDecodeError as e:
            raise bad(2, f"pattern is not valid JSON: {e}") from None
        if pattern is not None and not isinstance(pattern, str):
            raise bad(2, "pattern must be a JSON string or null")
        if pattern is not None:
            try:
                regex.compile(pattern)
            except regex.error as e:
                raise bad(2, f"pattern does not compile: {e}") from None

        specials: dict[str, int] = {}
        special_ids: set[int] = set()
        merges: dict[tuple[int, int], int] = {}

        def parse_id(n: int, s: str) -> int:
            if not s.isascii() or not s.isdigit():
                raise bad(n, f"{s!r} is not a non-negative integer")
            return int(s)

        for n, line in enumerate(lines[2:], start=3):
            if not line.strip():
                continue
            kind, _, rest = line.strip().partition(" ")
            if kind == "special":
                idx_s, _, tok_s = rest.strip().partition(" ")
                if not idx_s or not tok_s.strip():
                    raise bad(n, "expected 'special <id> <json string>'")
                idx = parse_id(n, idx_s)
                try:
                    tok = json.loads(tok_s)
                except json.JSONDecodeError as e:
                    raise bad(n, f"special token is not valid JSON: {e}") from None
                if not isinstance(tok, str) or not tok:
                    raise bad(n, "special token must be a non-empty JSON string")
                if tok in specials:
                    raise bad(n, f"duplicate special token {tok!r}")
                if idx < 256 + len(merges) or idx in special_ids:
                    raise bad(n, f"special token id {idx} is already taken")
                specials[tok] = idx
                special_ids.add(idx)
            elif kind == "merge":
                parts = rest.split()
                if len(parts) != 2:
                    raise bad(n, "expected 'merge <left> <right>'")
                left, right = parse_id(n, parts[0]), parse_id(n, parts[1])
                new_id = 256 + len(merges)
                if left >= new_id or right >= new_id:
                    raise bad(n, f"merge ({left}, {right}) uses an id not created before it")
                if (left, right) in merges:
                    raise bad(n, f"duplicate merge ({left}, {right})")
                if new_id in special_ids:
                    raise bad(n, f"merge creates id {new_id}, which a special token holds")
                merges[(left, right)] = new_id
            else:
                raise bad(n, f"unknown line kind {kind!r}")

        tok = cls(pattern=pattern, special_tokens=specials)
        for (left, right), new_id in merges.items():
            tok.vocab[new_id] = tok.vocab[left] + tok.vocab[right]
        tok.merges = merges
        return tok
