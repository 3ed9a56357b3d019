"""Kata: automatic prefix caching over a pool of KV blocks (vLLM V1's hash-chained full blocks).

A new request shares the longest cached prefix of whole blocks its prompt starts with, gets fresh
blocks for the rest, and caches each block as it fills. Blocks nobody uses stay cached until the pool
runs out, then go in a fixed order. Only the bookkeeping: no keys or values.

Design
------
* A full block is named by a SHA-256 digest chained to its parent's:
  ``h_0 = sha256(root(salt) || tokens[0:bs])``, ``h_i = sha256(h_{i-1} || tokens[i*bs:(i+1)*bs])``.
  One digest therefore stands for the salt plus the whole prefix through that block.
* ``_cached`` maps digest -> block id for every block holding a cached prefix (in use or not);
  ``_block_hash`` is its inverse.
* Plain free blocks live in a FIFO (``_plain``); evictable blocks (cached, refcount 0) live in an
  insertion-ordered dict (``_evictable``) whose front is the next block to evict.
* Each live request remembers its salt, its tokens, its block table and the chain digests of its
  full blocks (so ``append`` never re-hashes the prefix).
"""

from __future__ import annotations

import hashlib
import operator
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field


class OutOfBlocksError(RuntimeError):
    """Raised when a request needs more blocks than are free or evictable; nothing was changed."""


@dataclass
class _Request:
    salt: str | None
    tokens: list[int]
    table: list[int]
    hashes: list[bytes] = field(default_factory=list)  # chain digest of each full block


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_tokens(tokens: object, *, allow_empty: bool) -> list[int]:
    if isinstance(tokens, (str, bytes, bytearray)):
        raise ValueError("tokens must be a sequence of non-negative ints, not a string")
    try:
        items = list(tokens)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"tokens must be a sequence of non-negative ints, got {tokens!r}") from None
    out: list[int] = []
    for pos, tok in enumerate(items):
        if isinstance(tok, bool):
            raise ValueError(f"token at position {pos} is a bool ({tok!r}), not an int")
        try:
            value = operator.index(tok)
        except TypeError:
            raise ValueError(f"token at position {pos} is not an int: {tok!r}") from None
        if value < 0:
            raise ValueError(f"token at position {pos} is negative: {value}")
        out.append(value)
    if not out and not allow_empty:
        raise ValueError("the prompt must not be empty")
    return out


def _check_salt(salt: object) -> str | None:
    if salt is not None and not isinstance(salt, str):
        raise ValueError(f"salt must be a str or None, got {type(salt).__name__}")
    return salt


def _root_digest(salt: str | None) -> bytes:
    # None and "" are distinct salts: tag them differently.
    if salt is None:
        seed = b"prefix-cache/v1/nosalt"
    else:
        seed = b"prefix-cache/v1/salt:" + salt.encode("utf-8", "surrogatepass")
    return hashlib.sha256(seed).digest()


def _chain(parent: bytes, block_tokens: Sequence[int]) -> bytes:
    # The parent is a fixed 32 bytes and every block has block_size tokens, so this is unambiguous.
    h = hashlib.sha256(parent)
    h.update(",".join(map(str, block_tokens)).encode("ascii"))
    return h.digest()


class PrefixCache:
    """Block tables for requests over `num_blocks` blocks of `block_size` tokens, sharing cached prefixes."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        """Every block starts free and holds no prefix. Raises ValueError unless both are positive ints."""
        self._num_blocks = _check_positive_int("num_blocks", num_blocks)
        self._block_size = _check_positive_int("block_size", block_size)
        self._ref = [0] * self._num_blocks
        self._plain: deque[int] = deque(range(self._num_blocks))  # refcount 0, not cached
        self._evictable: dict[int, None] = {}  # refcount 0, cached; front = evicted first
        self._cached: dict[bytes, int] = {}  # prefix digest -> block holding it
        self._block_hash: dict[int, bytes] = {}  # block -> digest of the prefix it holds
        self._requests: dict[object, _Request] = {}

    # ------------------------------------------------------------------ counts

    @property
    def num_free(self) -> int:
        """Blocks a request could take now: plain free ones and evictable ones."""
        return len(self._plain) + len(self._evictable)

    @property
    def num_evictable(self) -> int:
        """Cached blocks that no request uses (refcount 0)."""
        return len(self._evictable)

    @property
    def num_cached(self) -> int:
        """Blocks that hold a cached prefix, in use or not."""
        return len(self._block_hash)

    def refcount(self, block: int) -> int:
        """How many live requests' tables hold `block`. Raises ValueError for an id outside the pool."""
        if isinstance(block, bool) or not isinstance(block, int):
            raise ValueError(f"block id must be an int in [0, {self._num_blocks}), got {block!r}")
        if not 0 <= block < self._num_blocks:
            raise ValueError(f"block id {block} is outside [0, {self._num_blocks})")
        return self._ref[block]

    def block_table(self, req_id: int) -> list[int]:
        """The request's blocks in logical order (a new list). Raises ValueError for an unknown request."""
        return list(self._live(req_id).table)

    def num_tokens(self, req_id: int) -> int:
        """Tokens the request holds (prompt and appended). Raises ValueError for an unknown request."""
        return len(self._live(req_id).tokens)

    # ------------------------------------------------------------------ helpers

    def _live(self, req_id: object) -> _Request:
        try:
            return self._requests[req_id]
        except (KeyError, TypeError):
            raise ValueError(f"request {req_id!r} is not live") from None

    def _prompt_hashes(self, tokens: list[int], salt: str | None) -> list[bytes]:
        bs = self._block_size
        hashes: list[bytes] = []
        parent = _root_digest(salt)
        for i in range(len(tokens) // bs):
            parent = _chain(parent, tokens[i * bs : (i + 1) * bs])
            hashes.append(parent)
        return hashes

    def _hits(self, tokens: list[int], hashes: list[bytes]) -> list[int]:
        """Blocks of the longest cached prefix, capped so the last prompt token is computed."""
        max_hits = (len(tokens) - 1) // self._block_size
        blocks: list[int] = []
        for h in hashes[:max_hits]:
            block = self._cached.get(h)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def _take_block(self) -> int:
        """A plain free block if any, else evict the block that became evictable earliest."""
        if self._plain:
            block = self._plain.popleft()
        else:
            block = next(iter(self._evictable))
            del self._evictable[block]
            del self._cached[self._block_hash.pop(block)]
        self._ref[block] = 1
        return block

    def _acquire(self, block: int) -> None:
        if self._ref[block] == 0:
            self._evictable.pop(block)  # a hit on an evictable block: in use again
        self._ref[block] += 1

    def _maybe_cache(self, block: int, h: bytes) -> None:
        """The first block to hold a prefix is the cached one; later ones stay plain for good."""
        if h not in self._cached:
            self._cached[h] = block
            self._block_hash[block] = h

    def _grow(self, req: _Request, new_tokens: list[int]) -> None:
        """Append tokens to `req`, block by block in position order (capacity already checked)."""
        bs = self._block_size
        pos = 0
        while pos < len(new_tokens):
            n = len(req.tokens)
            if n == len(req.table) * bs:  # last block full (or no block yet): take a new one
                req.table.append(self._take_block())
            room = len(req.table) * bs - len(req.tokens)
            chunk = new_tokens[pos : pos + room]
            req.tokens.extend(chunk)
            pos += len(chunk)
            if len(req.tokens) == len(req.table) * bs:  # the last block just filled
                parent = req.hashes[-1] if req.hashes else _root_digest(req.salt)
                h = _chain(parent, req.tokens[-bs:])
                req.hashes.append(h)
                self._maybe_cache(req.table[-1], h)

    # ------------------------------------------------------------------ API

    def match(self, tokens: Sequence[int], *, salt: str | None = None) -> int:
        """How many tokens a request with this prompt would find cached now. Changes nothing."""
        toks = _check_tokens(tokens, allow_empty=False)
        salt = _check_salt(salt)
        return len(self._hits(toks, self._prompt_hashes(toks, salt))) * self._block_size

    def add(self, req_id: int, tokens: Sequence[int], *, salt: str | None = None) -> int:
        """Start request `req_id` with prompt `tokens`; returns how many of its tokens were cached.

        Shares the longest cached prefix of whole blocks (leaving at least the last token to compute),
        allocates blocks for the rest and caches each full one. Raises OutOfBlocksError, changing
        nothing, when the pool cannot hold it; ValueError for bad input.
        """
        try:
            live = req_id in self._requests
        except TypeError:
            raise ValueError(f"req_id must be hashable, got {req_id!r}") from None
        if live:
            raise ValueError(f"request {req_id!r} is already live")
        toks = _check_tokens(tokens, allow_empty=False)
        salt = _check_salt(salt)

        bs = self._block_size
        hashes = self._prompt_hashes(toks, salt)
        hit_blocks = self._hits(toks, hashes)
        needed = -(-len(toks) // bs) - len(hit_blocks)
        available = self.num_free - sum(1 for b in hit_blocks if self._ref[b] == 0)
        if needed > available:
            raise OutOfBlocksError(
                f"request {req_id!r} needs {needed} new blocks but only {available} are available"
            )

        # Share the hits first: taking them off the eviction queue protects them.
        for b in hit_blocks:
            self._acquire(b)
        n_hit_tokens = len(hit_blocks) * bs
        req = _Request(
            salt=salt,
            tokens=toks[:n_hit_tokens],
            table=list(hit_blocks),
            hashes=hashes[: len(hit_blocks)],
        )
        self._requests[req_id] = req
        self._grow(req, toks[n_hit_tokens:])
        return n_hit_tokens

    def append(self, req_id: int, tokens: Sequence[int]) -> None:
        """The request grew by `tokens` (generated ones): blocks as needed, each full one cached.

        Raises OutOfBlocksError, changing nothing, when the pool cannot hold them.
        """
        req = self._live(req_id)
        toks = _check_tokens(tokens, allow_empty=True)
        if not toks:
            return
        bs = self._block_size
        needed = -(-(len(req.tokens) + len(toks)) // bs) - len(req.table)
        available = self.num_free
        if needed > available:
            raise OutOfBlocksError(
                f"request {req_id!r} needs {needed} new blocks but only {available} are available"
            )
        self._grow(req, toks)

    def free(self, req_id: int) -> None:
        """The request is done: its blocks lose a reference; cached ones left unused become evictable
        (this request's last block first in eviction order), plain ones go back to the free blocks."""
        req = self._live(req_id)
        del self._requests[req_id]
        for block in reversed(req.table):
            self._ref[block] -= 1
            if self._ref[block] == 0:
                if block in self._block_hash:
                    self._evictable[block] = None  # joins the back of the queue
                else:
                    self._plain.append(block)
