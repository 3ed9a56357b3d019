"""Byte-level BPE tokenizer: train, encode, decode (the `bpe` kata's reference).

Text is UTF-8 bytes. Training keeps merging the most frequent adjacent pair of tokens into a new
token while its count reaches the threshold; encoding replays the merges by rank, earliest first.
An optional regex splits text into chunks that merges never cross; special tokens are cut out
before that and never broken. `from_gpt2` and `from_tables` load the vocabulary SmolLM2 is served
with. Not here: normalisation, offsets, byte fallback, BPE dropout.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

import regex

from solutions.pretokenize import GPT2_PATTERN, Splitter
from solutions.pretokenize import GPT4_PATTERN as GPT4_PATTERN  # the kata's bpe.py defines both

FILE_HEADER = "bpe v1"
_CACHE_LIMIT = 1 << 16  # cached chunks; cleared when full
_LONG_CHUNK = 64  # bytes; longer chunks merge through a heap instead of repeated scans


class BPETokenizer:
    """Byte-level BPE. Ids 0..255 are the bytes; the i-th merge creates id 256 + i."""

    def __init__(self, pattern: str | None = None, special_tokens: dict[str, int] | None = None):
        """Raises ValueError for a pattern that does not compile or a bad special token
        (empty text, an id that is negative, repeated, or already a vocabulary id)."""
        self.pattern = pattern
        try:
            self._splitter = Splitter(pattern) if pattern is not None else None
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

        # Every distinct chunk's bytes as one run of a doubly linked list of nodes, each run
        # followed by a dead node (-1), so no pair crosses chunks; the list also ends dead, so
        # prev[first] == -1 reads that dead node too. Runs are grouped by their chunk's frequency
        # and joined by 0xFF (never in UTF-8), so each group's pairs are counted at C speed.
        ids: list[int] = []  # token at each node; -1 once merged into its left neighbour
        weight: list[int] = []  # how often the node's chunk occurs in the text
        counts: defaultdict[tuple[int, int], int] = defaultdict(int)
        by_freq: defaultdict[int, list[bytes]] = defaultdict(list)
        for chunk, freq in chunks.items():
            by_freq[freq].append(chunk.encode("utf-8"))
        for freq, group in by_freq.items():
            joined = b"\xff".join(group) + b"\xff"
            for pair, n in Counter(zip(joined, joined[1:])).items():
                counts[pair] += n * freq
            start = len(ids)
            ids += joined
            weight += [freq] * len(joined)
            dead = joined.find(255)
            while dead >= 0:
                ids[start + dead] = -1
                dead = joined.find(255, dead + 1)
        for pair in [pair for pair in counts if 255 in pair]:
            del counts[pair]  # pairs with a dead node
        nxt = list(range(1, len(ids) + 1))
        prev = list(range(-1, len(ids) - 1))
        where: defaultdict[tuple[int, int], list[int]] = defaultdict(list)  # pair -> left nodes
        for i, pair in enumerate(zip(ids, ids[1:])):
            where[pair].append(i)  # pairs with a dead node are never looked up
        # Old pairs' counts only fall, so a heap entry may overstate its pair's count (then it is
        # pushed again with the live count), and a pair below the threshold never comes back.
        heap = [(-c, a, b) for (a, b), c in counts.items() if c >= threshold]
        heapq.heapify(heap)

        merges: dict[tuple[int, int], int] = {}
        specials = set(self.special_tokens.values())
        while heap and len(merges) < limit:
            neg, a, b = heapq.heappop(heap)
            live = counts.get((a, b), 0)
            if live != -neg:
                if live >= threshold:
                    heapq.heappush(heap, (-live, a, b))
                continue
            new = 256 + len(merges)
            if new in specials:
                raise ValueError(f"merge {len(merges)} would create id {new}, held by a special token")
            merges[(a, b)] = new
            positions = where.pop((a, b))
            if a == b:
                positions.sort()  # overlapping runs merge left to right: "aaa" -> (aa, a)
            born = []  # pairs with the new token, repeated as often as they were made
            for i in positions:
                j = nxt[i]
                if ids[i] != a or ids[j] != b:
                    continue  # stale: an earlier merge consumed this occurrence
                w, p, k = weight[i], prev[i], nxt[j]
                left, right = ids[p], ids[k]
                if left >= 0:  # (left, a) becomes (left, new)
                    counts[(left, a)] -= w
                    pair = (left, new)
                    counts[pair] += w
                    where[pair].append(p)
                    born.append(pair)
                if right >= 0:  # (b, right) becomes (new, right)
                    counts[(b, right)] -= w
                    pair = (new, right)
                    counts[pair] += w
                    where[pair].append(i)
                    born.append(pair)
                ids[i], ids[j] = new, -1
                nxt[i], prev[k] = k, i
            del counts[(a, b)]
            for pair in set(born):
                if counts[pair] >= threshold:
                    heapq.heappush(heap, (-counts[pair], *pair))
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
                cache, whole, merge = self._cache, self.whole_tokens, self._encode_chunk
                if len(cache) > _CACHE_LIMIT:
                    cache.clear()
                cached = cache.get
                for chunk in chunks:
                    tokens = cached(chunk)
                    if tokens is None:
                        token = whole.get(chunk)
                        tokens = cache[chunk] = [token] if token is not None else merge(chunk.encode("utf-8"))
                    out += tokens
        return out

    def _encode_chunk(self, data: bytes) -> list[int]:
        """Merge one chunk's byte tokens by rank: the leftmost occurrence of the lowest-ranked
        pair, again and again (the same as replaying every merge in training order)."""
        ids = list(map(self._byte_ids.__getitem__, data))
        if self._missing_bytes:
            ids = [i for i in ids if i is not None]
        if len(ids) > _LONG_CHUNK:
            return self._encode_long_chunk(ids)
        # rank[i] is the rank of the pair (ids[i], ids[i + 1]); merge the leftmost lowest one.
        get, created, never = self._ranks.get, self._created, len(self._ranks)
        rank = [get(pair, never) for pair in zip(ids, ids[1:])]
        best = min(rank, default=never)
        while best != never:
            i = rank.index(best)
            ids[i] = created[best]
            del ids[i + 1], rank[i]
            if i > 0:
                rank[i - 1] = get((ids[i - 1], ids[i]), never)
            if i < len(rank):
                rank[i] = get((ids[i], ids[i + 1]), never)
            best = min(rank, default=never)
        return ids

    def _encode_long_chunk(self, ids: list[int]) -> list[int]:
        """_encode_chunk in O(n log n) for long chunks: a heap of (rank, node) over a linked list.
        Popping the lowest rank, then the leftmost node, merges in the same order."""
        ranks, merges, n = self._ranks, self.merges, len(ids)
        nxt, prev = list(range(1, n + 1)), list(range(-1, n - 1))
        heap = [(ranks[pair], i) for i, pair in enumerate(zip(ids, ids[1:])) if pair in ranks]
        heapq.heapify(heap)
        while heap:
            rank, i = heapq.heappop(heap)
            j = nxt[i]
            if ids[i] < 0 or j >= n or ranks.get((ids[i], ids[j])) != rank:
                continue  # stale: node i was merged away or its pair changed
            new = ids[i] = merges[(ids[i], ids[j])]
            ids[j], k, p = -1, nxt[j], prev[i]
            nxt[i] = k
            if k < n:
                prev[k] = i
                if (new, ids[k]) in ranks:
                    heapq.heappush(heap, (ranks[(new, ids[k])], i))
            if p >= 0 and (ids[p], new) in ranks:
                heapq.heappush(heap, (ranks[(ids[p], new)], p))
        return [t for t in ids if t >= 0]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`; bytes that are not valid UTF-8 become U+FFFD.

        Raises ValueError naming the first id that is neither a token nor a special token."""
        ids, table = list(ids), self._id_bytes
        try:
            data = b"".join([table[i] for i in ids])
        except (KeyError, TypeError):
            bad = next(i for i in ids if not isinstance(i, int) or i not in table)
            raise ValueError(f"unknown token id {bad!r}") from None
        return data.decode("utf-8", errors="replace")

    # ---- persistence -----------------------------------------------------------------------------

    def save(self, path) -> None:
        """Write the tokenizer as text (the format is in load's docstring)."""
        if self._byte_ids != list(range(256)) or any(
            n != 256 + i for i, n in enumerate(self.merges.values())
        ):
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
        alphabet = bytes_to_unicode()
        # Each alphabet character to the Latin-1 character of its byte; any other character below
        # U+0100 to one that Latin-1 cannot encode, as every character above it already is.
        to_latin1 = {c: "\ufffd" for c in range(256)} | {ord(ch): chr(b) for b, ch in alphabet.items()}
        specials = dict(special_tokens or {})
        tok = cls(pattern)
        try:
            tok.vocab = {
                i: s.translate(to_latin1).encode("latin-1") for s, i in vocab.items() if s not in specials
            }
        except UnicodeEncodeError:
            bad = next(
                ch
                for s in vocab
                if s not in specials
                for ch in s
                if ord(ch) not in to_latin1 or to_latin1[ord(ch)] == "\ufffd"
            )
            raise ValueError(f"vocabulary token uses {bad!r}, not a byte-level character") from None
        tok._byte_ids = [vocab.get(ch) for ch in alphabet.values()]
        tok.merges = {}
        get = vocab.get
        for merge in merges:
            a, _, b = merge.partition(" ")
            tok.merges[(get(a), get(b))] = get(a + b)
        if None in tok.merges.values() or any(None in pair for pair in tok.merges):  # checked once, after
            rank, merge = next(
                (r, m)
                for r, m in enumerate(merges)
                if not all(get(part) is not None for part in (*m.partition(" ")[::2], m.replace(" ", "", 1)))
            )
            raise ValueError(f"merge {rank} ({merge!r}) uses a token missing from the vocabulary")
        tok.special_tokens = specials
        tok._rebuild()
        # part of loading a large vocabulary
        tok._whole_tokens = tok._find_whole_tokens()
        return tok

    @classmethod
    def from_tables(
        cls,
        vocab: dict[int, bytes],
        merges: dict[tuple[int, int], int],
        pattern: str | None = GPT2_PATTERN,
        special_tokens: dict[str, int] | None = None,
        not_whole: Iterable[int] = (),
    ) -> BPETokenizer:
        """A tokenizer from the tables of an earlier one (solutions.system.loading.tokenizer keeps SmolLM2's so):
        `vocab` (id -> bytes, the 256 single bytes among them; kept, not copied), `merges` in rank
        order, and the ids whose text is not a whole token (whole_tokens holds every other).
        Raises ValueError for a merge whose ids are not in the vocabulary."""
        tok = cls(pattern)
        singles = {data[0]: i for i, data in vocab.items() if len(data) == 1}
        tok._byte_ids = [singles.get(b) for b in range(256)]
        if not all(a in vocab and b in vocab and c in vocab for (a, b), c in merges.items()):
            rank, (a, b), c = next(
                (r, p, c) for r, (p, c) in enumerate(merges.items()) if not {*p, c} <= vocab.keys()
            )
            raise ValueError(f"merge {rank} ({a}, {b}) -> {c} uses an id missing from the vocabulary")
        tok.vocab, tok.merges, tok.special_tokens = vocab, merges, dict(special_tokens or {})
        tok._rebuild()
        skip = set(not_whole)
        tok._whole_tokens = {data.decode("utf-8"): i for i, data in vocab.items() if i not in skip}
        return tok

    @property
    def whole_tokens(self) -> dict[str, int]:
        """Text -> id of the tokens a chunk can match in one lookup (built on first use)."""
        if self._whole_tokens is None:
            self._whole_tokens = self._find_whole_tokens()
        return self._whole_tokens

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
        self._created = list(self.merges.values())  # rank -> the id that merge creates
        self._missing_bytes = None in self._byte_ids
        self._id_bytes = {**self.vocab, **{i: s.encode("utf-8") for s, i in self.special_tokens.items()}}
        names = sorted(self.special_tokens, key=len, reverse=True)  # longest wins at one position
        self._special_splitter = regex.compile(f"({'|'.join(map(regex.escape, names))})") if names else None
        self._cache: dict[str, list[int]] = {}
        self._whole_tokens: dict[str, int] | None = None  # built by the first encode

    def _find_whole_tokens(self) -> dict[str, int]:
        """Tokens whose text encodes to themselves (in practice all): a chunk equal to one needs
        no merging. Checking costs one chunk encode per token, so the first encode (or loading a
        large vocabulary) pays it once."""
        whole = {}
        for i, data in self.vocab.items():
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue  # part of a character: never a whole chunk
            if self._encode_chunk(data) == [i]:
                whole[text] = i
        return whole


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes map to themselves,
    the other 68 bytes to U+0100 onwards, in byte order (so a space is 'Ġ', a newline 'Ċ')."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table
