"""Kata: automatic prefix caching over a pool of KV blocks (vLLM V1's hash-chained full blocks).

A new request shares the longest cached prefix of whole blocks its prompt starts with, gets fresh
blocks for the rest, and caches each block as it fills. Blocks nobody uses stay cached until the pool
runs out, then go in a fixed order. Only the bookkeeping: no keys or values. Replace every
`raise NotImplementedError` with your implementation; keep the names and signatures. Read the prompt
first: it is the contract (`dojo start prefix_cache` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

from collections.abc import Sequence


class OutOfBlocksError(RuntimeError):
    """Raised when a request needs more blocks than are free or evictable; nothing was changed."""


class PrefixCache:
    """Block tables for requests over `num_blocks` blocks of `block_size` tokens, sharing cached prefixes."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        """Every block starts free and holds no prefix. Raises ValueError unless both are positive ints."""
        raise NotImplementedError

    @property
    def num_free(self) -> int:
        """Blocks a request could take now: plain free ones and evictable ones."""
        raise NotImplementedError

    @property
    def num_evictable(self) -> int:
        """Cached blocks that no request uses (refcount 0)."""
        raise NotImplementedError

    @property
    def num_cached(self) -> int:
        """Blocks that hold a cached prefix, in use or not."""
        raise NotImplementedError

    def refcount(self, block: int) -> int:
        """How many live requests' tables hold `block`. Raises ValueError for an id outside the pool."""
        raise NotImplementedError

    def block_table(self, req_id: int) -> list[int]:
        """The request's blocks in logical order (a new list). Raises ValueError for an unknown request."""
        raise NotImplementedError

    def num_tokens(self, req_id: int) -> int:
        """Tokens the request holds (prompt and appended). Raises ValueError for an unknown request."""
        raise NotImplementedError

    def match(self, tokens: Sequence[int], *, salt: str | None = None) -> int:
        """How many tokens a request with this prompt would find cached now. Changes nothing."""
        raise NotImplementedError

    def add(self, req_id: int, tokens: Sequence[int], *, salt: str | None = None) -> int:
        """Start request `req_id` with prompt `tokens`; returns how many of its tokens were cached.

        Shares the longest cached prefix of whole blocks (leaving at least the last token to compute),
        allocates blocks for the rest and caches each full one. Raises OutOfBlocksError, changing
        nothing, when the pool cannot hold it; ValueError for bad input.
        """
        raise NotImplementedError

    def append(self, req_id: int, tokens: Sequence[int]) -> None:
        """The request grew by `tokens` (generated ones): blocks as needed, each full one cached.

        Raises OutOfBlocksError, changing nothing, when the pool cannot hold them.
        """
        raise NotImplementedError

    def free(self, req_id: int) -> None:
        """The request is done: its blocks lose a reference; cached ones left unused become evictable
        (this request's last block first in eviction order), plain ones go back to the free blocks."""
        raise NotImplementedError
