"""Decodes with errors='ignore': invalid UTF-8 bytes vanish instead of becoming U+FFFD.

Mutant of solutions/bpe.py for the bpe suite.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

import regex

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)
FILE_HEADER = "bpe v1"
_CACHE_LIMIT = 1 << 16  # cached chunks; cleared when full


class BPETokenizer:
    """Byte-level BPE. Ids 0..255 are the bytes; the i-th merge creates id 256 + i."""

    def __init__(self, pattern: str | None = None, special_tokens: dict[str, int] | None = None):
        """Raises ValueError for a pattern that does not compile or a bad special token
        (empty text, an id that is negative, repeated, or already a vocabulary id)."""
        self.pattern = pattern
        try:
            self._splitter = regex.compile(pattern) if pattern is not None else None
        except regex.error as exc:
            raise ValueError(f"pattern does not compile: {exc}") from None
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}
        self._byte_ids: list[int | None] = list(range(256))  # byte value -> token id
        self.special_tokens = dict(special_tokens or {})
        self._rebuild()

    # ---- training -----------------------------------------------------------------------------

    def train(self, text: str, threshold: int = 2, max_merges: int | None = None) -> None:
        """Learn merges on `text`, starting afresh from the 256 byte tokens.

        Merges the most frequent adjacent pair (overlaps counted, ties to the smallest pair) while
        its count is >= threshold, at most `max_merges` times. Special tokens are not looked for.
        Raises ValueError for threshold < 1, max_merges < 0, or a merge id held by a special token.
        """
        if threshold < 1:
            raise ValueError(f"threshold must be >= 1, got {threshold}")
        if max_merges is not None and max_merges < 0:
            raise ValueError(f"max_merges must be >= 0, got {max_merges}")
        limit = float("inf") if max_merges is None else max_merges
        chunks = Counter(self._splitter.findall(text) if self._splitter else [text])

        # Every distinct chunk's bytes as one run of a doubly linked list; runs do not touch.
        ids: list[int] = []  # token at each node; -1 once merged into its left neighbour
        weight: list[int] = []  # how often the node's chunk occurs in the text
        for chunk, freq in chunks.items():
            data = chunk.encode("utf-8")
            ids += data
            ids.append(-1)  # a dead node separating runs, so pairs never cross chunks
            weight += [freq] * (len(data) + 1)
        nxt = list(range(1, len(ids) + 1))
        prev = list(range(-1, len(ids) - 1))

        counts: defaultdict[tuple[int, int], int] = defaultdict(int)
        where: defaultdict[tuple[int, int], list[int]] = defaultdict(list)  # left-node positions
        for i in range(len(ids) - 1):
            pair = (ids[i], ids[i + 1])
            if pair[0] >= 0 and pair[1] >= 0:
                counts[pair] += weight[i]
                where[pair].append(i)
        # A pair's count only falls after the merge that creates it, so an entry whose count
        # differs from the live one is stale, and pairs below threshold can never come back.
        heap = [(-c, a, b) for (a, b), c in counts.items() if c >= threshold]
        heapq.heapify(heap)

        merges: dict[tuple[int, int], int] = {}
        specials = set(self.special_tokens.values())
        while heap and len(merges) < limit:
            neg, a, b = heapq.heappop(heap)
            if counts.get((a, b)) != -neg:
                continue
            new = 256 + len(merges)
            if new in specials:
                raise ValueError(f"merge {len(merges)} would create id {new}, held by a special token")
            merges[(a, b)] = new
            touched = set()
            for i in sorted(where.pop((a, b))):  # left to right, so "aaa" -> (aa, a)
                j = nxt[i]
                if ids[i] != a or j >= len(ids) or ids[j] != b:
                    continue  # stale: this occurrence was consumed by an earlier merge
                w, p, k = weight[i], prev[i], nxt[j]
                counts[(a, b)] -= w
                if p >= 0 and ids[p] >= 0:
                    for pair, d in (((ids[p], a), -w), ((ids[p], new), w)):
                        counts[pair] += d
                        touched.add(pair)
                    where[(ids[p], new)].append(p)
                if k < len(ids) and ids[k] >= 0:
                    for pair, d in (((b, ids[k]), -w), ((new, ids[k]), w)):
                        counts[pair] += d
                        touched.add(pair)
                    where[(new, ids[k])].append(i)
                ids[i], ids[j] = new, -1
                nxt[i] = k
                if k < len(ids):
                    prev[k] = i
            del counts[(a, b)]
            for pair in touched:
                c = counts[pair]
                if c >= threshold:
                    heapq.heappush(heap, (-c, *pair))
        self.merges = merges
        self.vocab = {i: bytes([i]) for i in range(256)}
        for (a, b), new in merges.items():
            self.vocab[new] = self.vocab[a] + self.vocab[b]
        self._byte_ids = list(range(256))
        self._rebuild()

    # ---- encoding and decoding -----------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`: special tokens whole, then each chunk's bytes merged by rank."""
        out: list[int] = []
        parts = self._special_splitter.split(text) if self._special_splitter else [text]
        for n, part in enumerate(parts):  # odd positions hold the special tokens
            if n % 2:
                out.append(self.special_tokens[part])
            elif part:
                chunks = self._splitter.findall(part) if self._splitter else [part]
                cache = self._cache
                for chunk in chunks:
                    tokens = cache.get(chunk)
                    if tokens is None:
                        if len(cache) >= _CACHE_LIMIT:
                            cache.clear()
                        tokens = cache[chunk] = self._encode_chunk(chunk.encode("utf-8"))
                    out += tokens
        return out

    def _encode_chunk(self, data: bytes) -> list[int]:
        """Merge one chunk's byte tokens: the lowest-ranked pair present, all its occurrences."""
        ids = [self._byte_ids[b] for b in data]
        if self._missing_bytes:
            ids = [i for i in ids if i is not None]
        ranks, merges, never = self._ranks, self.merges, len(self._ranks)
        while len(ids) > 1:
            rank, a, b = min((ranks.get(pair, never), *pair) for pair in zip(ids, ids[1:]))
            if rank == never:
                break
            new, merged, i, n = merges[(a, b)], [], 0, len(ids)
            while i < n:
                if ids[i] == a and i + 1 < n and ids[i + 1] == b:
                    merged.append(new)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            ids = merged
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`; bytes that are not valid UTF-8 become U+FFFD.

        Raises ValueError naming the first id that is neither a token nor a special token."""
        ids, table = list(ids), self._id_bytes
        try:
            data = b"".join([table[i] for i in ids])
        except (KeyError, TypeError):
            bad = next(i for i in ids if not isinstance(i, int) or i not in table)
            raise ValueError(f"unknown token id {bad!r}") from None
        return data.decode("utf-8", errors="ignore")

    # ---- persistence -----------------------------------------------------------------------------

    def save(self, path) -> None:
        """Write the tokenizer as text (the format is in load's docstring)."""
        if self._byte_ids != list(range(256)) or any(n != 256 + i for i, n in enumerate(self.merges.values())):
            raise ValueError("save needs ids 0..255 to be the bytes and the i-th merge to create 256 + i")
        lines = [FILE_HEADER, f"pattern {json.dumps(self.pattern)}"]
        lines += [f"special {i} {json.dumps(s)}" for s, i in self.special_tokens.items()]
        lines += [f"merge {a} {b}" for a, b in self.merges]
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path) -> BPETokenizer:
        """Read a file written by save. Line 1 `bpe v1`; line 2 `pattern <JSON string or null>`;
        then `special <id> <JSON string>` and `merge <left> <right>` lines (merges in order, the
        i-th creating 256 + i). Blank lines are skipped. Raises ValueError naming the bad line."""
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        if lines[0].strip() != FILE_HEADER:
            raise ValueError(f"line 1: expected {FILE_HEADER!r}, got {lines[0][:40]!r}")
        pattern, specials, merges = None, {}, []
        for n, line in enumerate(lines[1:], start=2):
            kind, _, rest = line.strip().partition(" ")
            try:
                if n == 2:
                    if kind != "pattern":
                        raise ValueError("expected 'pattern <JSON string or null>'")
                    pattern = json.loads(rest)
                    if pattern is not None and not isinstance(pattern, str):
                        raise ValueError("the pattern must be a JSON string or null")
                    regex.compile(pattern or "")
                elif kind == "special":
                    sid, _, name = rest.partition(" ")
                    name = json.loads(name)
                    if not isinstance(name, str) or name in specials:
                        raise ValueError("expected a new special token as a JSON string")
                    specials[name] = int(sid)
                    cls(None, specials)  # checks the id against the bytes and the other specials
                elif kind == "merge":
                    a, b = map(int, rest.split(" "))
                    if not (0 <= a < 256 + len(merges) and 0 <= b < 256 + len(merges)):
                        raise ValueError(f"merge refers to an id not yet created ({a}, {b})")
                    new = 256 + len(merges)
                    if new in specials.values():
                        raise ValueError(f"merge creates id {new}, held by a special token")
                    merges.append((a, b))
                elif kind:
                    raise ValueError(f"unknown entry {kind!r}")
            except (ValueError, regex.error) as exc:  # json and int errors are ValueErrors too
                raise ValueError(f"line {n}: {exc}: {line[:80]!r}") from None
        if len(lines) < 2:
            raise ValueError("line 2: missing the pattern line")
        for name, sid in specials.items():
            if 256 <= sid < 256 + len(merges):
                raise ValueError(f"special token {name!r} has id {sid}, which merge {sid - 256} creates")
        tok = cls(pattern, specials)
        tok.merges = {pair: 256 + i for i, pair in enumerate(merges)}
        for (a, b), new in tok.merges.items():
            tok.vocab[new] = tok.vocab[a] + tok.vocab[b]
        tok._rebuild()
        return tok

    @classmethod
    def from_gpt2(
        cls,
        vocab: dict[str, int],
        merges: list[str],
        pattern: str | None = GPT2_PATTERN,
        special_tokens: dict[str, int] | None = None,
    ) -> BPETokenizer:
        """A tokenizer from a GPT-2-style vocabulary (token strings over the byte-to-unicode
        alphabet) and merges ("Ġ t", ranked by position). Special tokens are left out of the byte
        vocabulary. Bytes with no token are dropped when encoding, as HuggingFace does.
        Raises ValueError for a token outside the alphabet or a merge whose parts are unknown."""
        to_byte = {ch: b for b, ch in bytes_to_unicode().items()}
        specials = dict(special_tokens or {})
        tok = cls(pattern)
        try:
            tok.vocab = {i: bytes(to_byte[ch] for ch in s) for s, i in vocab.items() if s not in specials}
        except KeyError as exc:
            raise ValueError(f"vocabulary token uses {exc.args[0]!r}, not a byte-level character") from None
        tok._byte_ids = [vocab.get(ch) for ch in bytes_to_unicode().values()]
        tok.merges = {}
        for rank, merge in enumerate(merges):
            a, _, b = merge.partition(" ")
            if a not in vocab or b not in vocab or a + b not in vocab:
                raise ValueError(f"merge {rank} ({merge!r}) uses a token missing from the vocabulary")
            tok.merges[(vocab[a], vocab[b])] = vocab[a + b]
        tok.special_tokens = specials
        tok._rebuild()
        return tok

    # ---- derived tables --------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """Recompute the lookup tables after the merges, vocabulary or special tokens change."""
        ids = set(self.vocab)
        seen: set[int] = set()
        for name, sid in self.special_tokens.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"special token {name!r} must be a non-empty string")
            if not isinstance(sid, int) or isinstance(sid, bool) or sid < 0:
                raise ValueError(f"special token {name!r} needs a non-negative integer id, got {sid!r}")
            if sid in ids or sid in seen:
                raise ValueError(f"special token {name!r} has id {sid}, which is already taken")
            seen.add(sid)
        self._ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        self._missing_bytes = None in self._byte_ids
        self._id_bytes = {**self.vocab, **{i: s.encode("utf-8") for s, i in self.special_tokens.items()}}
        names = sorted(self.special_tokens, key=len, reverse=True)  # longest wins at one position
        self._special_splitter = regex.compile(f"({'|'.join(map(regex.escape, names))})") if names else None
        self._cache: dict[str, list[int]] = {}


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes map to themselves,
    the other 68 bytes to U+0100 onwards, in byte order (so a space is 'Ġ', a newline 'Ċ')."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table
