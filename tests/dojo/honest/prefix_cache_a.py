"""Kata: automatic prefix caching over a pool of KV blocks (vLLM V1's hash-chained full blocks).

A new request shares the longest cached prefix of whole blocks its prompt starts with, gets fresh
blocks for the rest, and caches each block as it fills. Blocks nobody uses stay cached until the pool
runs out, then go in a fixed order. Only the bookkeeping: no keys or values.

Design
------
* A full block is keyed by a SHA-256 digest chained to its parent's digest:
  ``h_i = sha256(h_{i-1} || tokens of block i)``, with ``h_{-1}`` derived from the salt (``None``
  and every str, ``""`` included, give distinct roots).  One digest therefore stands for the whole
  prefix (salt + every token through the block's end), so finding a prompt's cached prefix is one
  dict look-up per block.  Keys depend only on content, never on block ids, so a child stays
  findable after its parent is evicted and re-filled elsewhere.
* ``_cached``: digest -> the block holding that prefix (the first block to fill it).
* ``_evictable``: an OrderedDict used as a FIFO of cached blocks with refcount 0, in the order they
  became evictable; the front is evicted first.
* ``_plain_free``: a min-heap of free blocks that hold no prefix (lowest id handed out first).
* Allocation takes all new blocks first (evicting as needed), then caches the blocks that filled,
  as vLLM V1 does (``allocate_slots`` then ``cache_blocks``).
"""

from __future__ import annotations

import hashlib
import heapq
import numbers
from collections import OrderedDict
from collections.abc import Hashable, Sequence


class OutOfBlocksError(RuntimeError):
    """Raised when a request needs more blocks than are free or evictable; nothing was changed."""


def _is_int(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _check_tokens(tokens: object) -> list[int]:
    if isinstance(tokens, (str, bytes, bytearray)):
        raise ValueError(f"tokens must be a sequence of non-negative ints, got {type(tokens).__name__}")
    try:
        toks = list(tokens)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(
            f"tokens must be a sequence of non-negative ints, got {type(tokens).__name__}"
        ) from None
    out: list[int] = []
    for i, t in enumerate(toks):
        if not _is_int(t):
            raise ValueError(f"token {i} is {t!r} ({type(t).__name__}), not a non-negative int")
        t = int(t)
        if t < 0:
            raise ValueError(f"token {i} is {t}, a negative number")
        out.append(t)
    return out


def _check_salt(salt: object) -> None:
    if salt is not None and not isinstance(salt, str):
        raise ValueError(f"salt must be a str or None, got {type(salt).__name__}")


def _root_digest(salt: str | None) -> bytes:
    if salt is None:
        return hashlib.sha256(b"prefix-cache-root\x00none").digest()
    return hashlib.sha256(b"prefix-cache-root\x01str\x00" + salt.encode("utf-8", "surrogatepass")).digest()


def _chain(parent: bytes, block_tokens: Sequence[int]) -> bytes:
    # parent is a fixed 32 bytes; tokens are comma-separated decimals, so the encoding is injective.
    payload = ",".join(map(str, block_tokens)).encode("ascii")
    return hashlib.sha256(parent + payload).digest()


class _Request:
    __slots__ = ("salt", "tokens", "table", "digests")

    def __init__(self, salt: str | None, tokens: list[int], table: list[int], digests: list[bytes]) -> None:
        self.salt = salt
        self.tokens = tokens  # every token the request holds
        self.table = table  # its blocks in logical order
        self.digests = digests  # digest of each full block's prefix, in order


class PrefixCache:
    """Block tables for requests over `num_blocks` blocks of `block_size` tokens, sharing cached prefixes."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        """Every block starts free and holds no prefix. Raises ValueError unless both are positive ints."""
        for name, v in (("num_blocks", num_blocks), ("block_size", block_size)):
            if not _is_int(v):
                raise ValueError(f"{name} must be a positive int, got {v!r} ({type(v).__name__})")
            if v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v}")
        self._num_blocks = int(num_blocks)
        self._block_size = int(block_size)
        self._refcount = [0] * self._num_blocks
        self._block_digest: list[bytes | None] = [None] * self._num_blocks  # prefix a block holds
        self._cached: dict[bytes, int] = {}  # prefix digest -> block holding it
        self._evictable: OrderedDict[int, None] = OrderedDict()  # FIFO, front evicted first
        self._plain_free: list[int] = list(range(self._num_blocks))  # min-heap
        heapq.heapify(self._plain_free)
        self._requests: dict[Hashable, _Request] = {}

    # ------------------------------------------------------------------ counts

    @property
    def num_free(self) -> int:
        """Blocks a request could take now: plain free ones and evictable ones."""
        return len(self._plain_free) + len(self._evictable)

    @property
    def num_evictable(self) -> int:
        """Cached blocks that no request uses (refcount 0)."""
        return len(self._evictable)

    @property
    def num_cached(self) -> int:
        """Blocks that hold a cached prefix, in use or not."""
        return len(self._cached)

    def refcount(self, block: int) -> int:
        """How many live requests' tables hold `block`. Raises ValueError for an id outside the pool."""
        if not _is_int(block) or not 0 <= int(block) < self._num_blocks:
            raise ValueError(f"block {block!r} is outside [0, {self._num_blocks})")
        return self._refcount[int(block)]

    def block_table(self, req_id: int) -> list[int]:
        """The request's blocks in logical order (a new list). Raises ValueError for an unknown request."""
        return list(self._live(req_id).table)

    def num_tokens(self, req_id: int) -> int:
        """Tokens the request holds (prompt and appended). Raises ValueError for an unknown request."""
        return len(self._live(req_id).tokens)

    # ------------------------------------------------------------------ helpers

    def _live(self, req_id: object) -> _Request:
        try:
            req = self._requests.get(req_id)  # type: ignore[arg-type]
        except TypeError:
            raise ValueError(f"request id {req_id!r} is not hashable") from None
        if req is None:
            raise ValueError(f"request {req_id!r} is not live")
        return req

    def _digests(
        self, salt: str | None, tokens: list[int], start: int = 0, parent: bytes | None = None
    ) -> list[bytes]:
        """Digests of full blocks start, start+1, ... of `tokens` (parent = digest of block start-1)."""
        bs = self._block_size
        h = _root_digest(salt) if parent is None else parent
        out = []
        for i in range(start, len(tokens) // bs):
            h = _chain(h, tokens[i * bs : (i + 1) * bs])
            out.append(h)
        return out

    def _hits(self, tokens: list[int], digests: list[bytes]) -> list[int]:
        """Blocks of the longest cached run 0..hits-1, capped so the last token is computed."""
        max_hits = (len(tokens) - 1) // self._block_size
        hits = []
        for d in digests[:max_hits]:
            b = self._cached.get(d)
            if b is None:
                break
            hits.append(b)
        return hits

    def _take(self, n: int) -> list[int]:
        """Hand out n blocks: plain free ones first, then evict the oldest evictable ones.

        The caller has checked that n blocks are available."""
        out = []
        for _ in range(n):
            if self._plain_free:
                out.append(heapq.heappop(self._plain_free))
            else:
                b, _ = self._evictable.popitem(last=False)
                d = self._block_digest[b]
                assert d is not None and self._cached.get(d) == b
                del self._cached[d]
                self._block_digest[b] = None
                out.append(b)
        for b in out:
            self._refcount[b] = 1
        return out

    def _cache(self, block: int, digest: bytes) -> None:
        """A block just filled with prefix `digest`: cache it unless another block already holds it."""
        if digest not in self._cached:
            self._cached[digest] = block
            self._block_digest[block] = digest

    # ------------------------------------------------------------------ API

    def match(self, tokens: Sequence[int], *, salt: str | None = None) -> int:
        """How many tokens a request with this prompt would find cached now. Changes nothing."""
        toks = _check_tokens(tokens)
        _check_salt(salt)
        if not toks:
            raise ValueError("empty prompt")
        bs = self._block_size
        max_hits = (len(toks) - 1) // bs
        h = _root_digest(salt)
        hits = 0
        for i in range(max_hits):
            h = _chain(h, toks[i * bs : (i + 1) * bs])
            if h not in self._cached:
                break
            hits += 1
        return hits * bs

    def add(self, req_id: int, tokens: Sequence[int], *, salt: str | None = None) -> int:
        """Start request `req_id` with prompt `tokens`; returns how many of its tokens were cached.

        Shares the longest cached prefix of whole blocks (leaving at least the last token to compute),
        allocates blocks for the rest and caches each full one. Raises OutOfBlocksError, changing
        nothing, when the pool cannot hold it; ValueError for bad input.
        """
        try:
            live = req_id in self._requests
        except TypeError:
            raise ValueError(f"request id {req_id!r} is not hashable") from None
        if live:
            raise ValueError(f"request {req_id!r} is already live")
        toks = _check_tokens(tokens)
        _check_salt(salt)
        if not toks:
            raise ValueError("empty prompt")

        bs = self._block_size
        digests = self._digests(salt, toks)
        hits = self._hits(toks, digests)
        needed = -(-len(toks) // bs) - len(hits)
        evictable_hits = sum(1 for b in hits if self._refcount[b] == 0)
        available = self.num_free - evictable_hits
        if needed > available:
            raise OutOfBlocksError(
                f"request {req_id!r} needs {needed} new blocks but only {available} are available"
            )

        # Share the hits (an evictable hit leaves the eviction queue: it is in use again).
        for b in hits:
            if self._refcount[b] == 0:
                del self._evictable[b]
            self._refcount[b] += 1
        # Take all new blocks, then cache those the prompt fills.
        new = self._take(needed)
        table = hits + new
        for i in range(len(hits), len(digests)):
            self._cache(table[i], digests[i])
        self._requests[req_id] = _Request(salt, toks, table, digests)
        return len(hits) * bs

    def append(self, req_id: int, tokens: Sequence[int]) -> None:
        """The request grew by `tokens` (generated ones): blocks as needed, each full one cached.

        Raises OutOfBlocksError, changing nothing, when the pool cannot hold them.
        """
        req = self._live(req_id)
        toks = _check_tokens(tokens)
        if not toks:
            return
        bs = self._block_size
        total = len(req.tokens) + len(toks)
        needed = -(-total // bs) - len(req.table)
        if needed > self.num_free:
            raise OutOfBlocksError(
                f"request {req_id!r} needs {needed} new blocks but only {self.num_free} are available"
            )

        new = self._take(needed)
        req.table.extend(new)
        req.tokens.extend(toks)
        start = len(req.digests)
        parent = req.digests[-1] if req.digests else None
        fresh = self._digests(req.salt, req.tokens, start, parent)
        for i, d in enumerate(fresh, start):
            self._cache(req.table[i], d)
        req.digests.extend(fresh)

    def free(self, req_id: int) -> None:
        """The request is done: its blocks lose a reference; cached ones left unused become evictable
        (this request's last block first in eviction order), plain ones go back to the free blocks."""
        req = self._live(req_id)
        del self._requests[req_id]
        for b in reversed(req.table):
            self._refcount[b] -= 1
            if self._refcount[b] == 0:
                if self._block_digest[b] is not None:
                    self._evictable[b] = None  # joins the back of the queue
                else:
                    heapq.heappush(self._plain_free, b)
