"""Automatic prefix caching over a pool of KV blocks, as vLLM V1 does it: hash-chained full blocks.

A full block is known by the digest of its tokens chained to its parent's (the first one's also holds
the tenant's salt), so one digest names a whole prefix. A new request shares the longest run of cached
blocks its prompt starts with, and gets fresh blocks for the rest. A block nobody uses stays cached,
evictable in the order blocks were let go. Only block bookkeeping lives here: which block holds
which prefix, and reference counts. The keys and values are the paged cache's (solutions/paged_kv.py).
Not here: a radix tree (SGLang's structure), partial-block hits, swapping to another device.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field


class OutOfBlocksError(RuntimeError):
    """Raised when a request needs more blocks than are free or evictable; nothing was changed."""


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _tokens(tokens: object, what: str) -> list[int]:
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise ValueError(f"{what} must be a sequence of ints (token ids), got {type(tokens).__name__}")
    out = list(tokens)
    for i, t in enumerate(out):
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ValueError(f"{what}[{i}] must be a non-negative int (a token id), got {t!r}")
    return out


def block_digest(parent: bytes | None, tokens: Sequence[int], salt: str | None) -> bytes:
    """The digest of one full block: its tokens chained to its parent's digest (None for the first block,
    whose digest holds the salt instead). Equal digests mean equal prefixes, salt included."""
    h = hashlib.sha256()
    h.update(b"P" + parent if parent is not None else b"S" + ("" if salt is None else "\0" + salt).encode())
    h.update(b"".join(t.to_bytes(8, "little") for t in tokens))
    return h.digest()


@dataclass
class _Request:
    tokens: list[int]
    salt: str | None
    table: list[int] = field(default_factory=list)  # physical blocks in logical order
    digests: list[bytes] = field(default_factory=list)  # the digest of each full block, in order


class PrefixCache:
    """Block tables for requests over `num_blocks` blocks of `block_size` tokens, sharing cached prefixes."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = _positive("num_blocks", num_blocks)
        self.block_size = _positive("block_size", block_size)
        self._refs = [0] * num_blocks
        self._plain = list(range(num_blocks - 1, -1, -1))  # free, holding no prefix: a stack, 0 first
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, refcount 0: oldest first
        self._cached: dict[bytes, int] = {}  # digest -> the block holding that prefix
        self._digest_of: dict[int, bytes] = {}  # block -> its digest, for cached blocks
        self._requests: dict[int, _Request] = {}

    # ---- what a caller reads

    @property
    def num_free(self) -> int:
        """Blocks a request could take now: plain free ones and cached ones no request uses."""
        return len(self._plain) + len(self._evictable)

    @property
    def num_evictable(self) -> int:
        """Cached blocks that no request uses: kept for a later hit, given up when the pool runs out."""
        return len(self._evictable)

    @property
    def num_cached(self) -> int:
        """Blocks that hold a cached prefix, in use or not."""
        return len(self._cached)

    def refcount(self, block: int) -> int:
        """How many requests' tables hold `block` (0: free or evictable)."""
        if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block < self.num_blocks:
            raise ValueError(f"block must be an int in [0, {self.num_blocks}), got {block!r}")
        return self._refs[block]

    def block_table(self, req_id: int) -> list[int]:
        return list(self._request(req_id).table)

    def num_tokens(self, req_id: int) -> int:
        return len(self._request(req_id).tokens)

    def match(self, tokens: Sequence[int], *, salt: str | None = None) -> int:
        """How many tokens a request with this prompt would find cached now; changes nothing."""
        return len(self._hits(_tokens(tokens, "tokens"), salt)) * self.block_size

    # ---- what a caller does

    def add(self, req_id: int, tokens: Sequence[int], *, salt: str | None = None) -> int:
        """Start request `req_id` with prompt `tokens`: share the longest cached prefix of whole blocks
        (at most len(tokens) - 1 tokens: the last prompt token is always computed, for its logits),
        allocate blocks for the rest, cache its full blocks. Returns the number of cached tokens.
        Raises OutOfBlocksError, changing nothing, when the pool cannot hold it."""
        if isinstance(req_id, bool) or not isinstance(req_id, int):
            raise ValueError(f"req_id must be an int, got {req_id!r}")
        if req_id in self._requests:
            raise ValueError(f"request {req_id} exists already")
        if salt is not None and not isinstance(salt, str):
            raise ValueError(f"salt must be a str or None, got {salt!r}")
        tokens = _tokens(tokens, "tokens")
        if not tokens:
            raise ValueError("a prompt needs at least one token")
        hits = self._hits(tokens, salt)
        needed = -(-len(tokens) // self.block_size) - len(hits)
        # A hit on an evictable block takes it out of the free count: it cannot also be allocated.
        available = self.num_free - sum(1 for b in hits if self._refs[b] == 0)
        if needed > available:
            raise OutOfBlocksError(
                f"request {req_id} needs {needed} new blocks ({len(tokens)} tokens, {len(hits)} blocks cached); "
                f"{available} are free or evictable"
            )
        request = _Request(tokens=[], salt=salt)
        for block in hits:
            self._take(block)
            request.table.append(block)
            request.digests.append(self._digest_of[block])
        request.tokens = tokens[: len(hits) * self.block_size]
        self._requests[req_id] = request
        self._grow(request, tokens[len(request.tokens) :])
        return len(hits) * self.block_size

    def append(self, req_id: int, tokens: Sequence[int]) -> None:
        """The request's sequence grew by `tokens` (generated ones): blocks as needed, full ones cached.
        Raises OutOfBlocksError, changing nothing, when the pool cannot hold them."""
        request = self._request(req_id)
        tokens = _tokens(tokens, "tokens")
        needed = -(-(len(request.tokens) + len(tokens)) // self.block_size) - len(request.table)
        if needed > self.num_free:
            raise OutOfBlocksError(
                f"request {req_id} needs {needed} new blocks; {self.num_free} are free or evictable"
            )
        self._grow(request, tokens)

    def free(self, req_id: int) -> None:
        """The request is done: each of its blocks loses a reference. A cached block left with none stays
        cached and becomes evictable, the request's last block first in eviction order (a prefix's tail
        is the least likely to be asked for again); a plain one goes back to the free blocks."""
        request = self._requests.pop(self._check_id(req_id))
        for block in reversed(request.table):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if block in self._digest_of:
                    self._evictable[block] = None
                else:
                    self._plain.append(block)

    # ---- inside

    def _hits(self, tokens: list[int], salt: str | None) -> list[int]:
        """The cached blocks holding the prompt's longest prefix of whole blocks, leaving >= 1 token."""
        hits: list[int] = []
        parent = None
        for start in range(0, len(tokens) - 1 - self.block_size + 1, self.block_size):
            parent = block_digest(parent, tokens[start : start + self.block_size], salt)
            block = self._cached.get(parent)
            if block is None:
                break
            hits.append(block)
        return hits

    def _grow(self, request: _Request, tokens: list[int]) -> None:
        """Append tokens, allocating a block at each boundary and caching each block that fills."""
        for token in tokens:
            if len(request.tokens) == len(request.table) * self.block_size:
                request.table.append(self._allocate())
            request.tokens.append(token)
            if len(request.tokens) % self.block_size == 0:
                self._insert(request)

    def _insert(self, request: _Request) -> None:
        """The request's last block just filled: cache it, unless another block holds that prefix already
        (then this one stays plain, and the first keeps serving hits)."""
        start = len(request.digests) * self.block_size
        parent = request.digests[-1] if request.digests else None
        digest = block_digest(parent, request.tokens[start : start + self.block_size], request.salt)
        request.digests.append(digest)
        if digest not in self._cached:
            block = request.table[len(request.digests) - 1]
            self._cached[digest] = block
            self._digest_of[block] = digest

    def _allocate(self) -> int:
        """A plain free block if there is one; else evict the block that has been evictable longest."""
        if self._plain:
            block = self._plain.pop()
        else:
            block, _ = self._evictable.popitem(last=False)
            del self._cached[self._digest_of.pop(block)]
        self._refs[block] = 1
        return block

    def _take(self, block: int) -> None:
        if self._refs[block] == 0:
            del self._evictable[block]
        self._refs[block] += 1

    def _check_id(self, req_id: int) -> int:
        if req_id not in self._requests:
            raise ValueError(f"unknown request {req_id!r}")
        return req_id

    def _request(self, req_id: int) -> _Request:
        return self._requests[self._check_id(req_id)]
