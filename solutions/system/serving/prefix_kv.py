"""The serving engine's paged KV cache with automatic prefix caching (the prefix_cache kata's rules).

`CachingPagedKVCache` is the paged_kv kata's cache whose allocator remembers full blocks by their
prefix's digest (solutions.prefix_cache.block_digest) and keeps them after their sequences end:
evictable, least recently freed first and a sequence's tail before its head, taken only when no plain
block is free. `start` opens a sequence on the longest cached prefix of its prompt and `extend` grows
it along more cached blocks (whole blocks, the last token left to compute); `publish` records the
blocks a sequence has filled. A sequence's `salt` (the kata's, a tenant's key) is in its first
block's digest, so sequences with different salts never share a block. Not here: partial-block hits,
moving blocks off the device.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from solutions.paged_kv import BlockAllocator, PagedKVCache
from solutions.prefix_cache import block_digest


class CachingAllocator(BlockAllocator):
    """A BlockAllocator whose blocks may hold a cached prefix; those stay evictable at refcount 0."""

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self._evictable: OrderedDict[int, None] = OrderedDict()  # oldest first
        self._cached: dict[bytes, int] = {}  # digest -> block
        self._digest_of: dict[int, bytes] = {}

    @property
    def num_free(self) -> int:
        """Plain free blocks and evictable cached ones: what an allocation can take."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def allocate(self) -> int:
        if self._free or not self._evictable:
            return super().allocate()  # OutOfBlocksError when neither is left
        block, _ = self._evictable.popitem(last=False)
        del self._cached[self._digest_of.pop(block)]
        self._refs[block] = 1
        return block

    def share(self, block: int) -> None:
        """One more reference; an evictable block is in use again."""
        if block in self._evictable:
            del self._evictable[block]
            self._refs[block] = 1
            return
        super().share(block)

    def release(self, block: int) -> None:
        self._check_in_use(block, "release")
        self._refs[block] -= 1
        if self._refs[block] == 0:
            if block in self._digest_of:
                self._evictable[block] = None
            else:
                self._free.append(block)

    def lookup(self, digest: bytes) -> int | None:
        return self._cached.get(digest)

    def publish(self, block: int, digest: bytes) -> None:
        """Block `block` (in use, full) holds the prefix `digest`; the first block to hold one keeps it."""
        if digest not in self._cached and block not in self._digest_of:
            self._cached[digest] = block
            self._digest_of[block] = digest


class CachingPagedKVCache(PagedKVCache):
    """PagedKVCache whose full blocks are found again by prefix, across sequences that have ended."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.allocator = CachingAllocator(self.num_blocks)
        self._digests: dict[int, list[bytes]] = {}  # per sequence: digests of its published blocks
        self._salts: dict[int, str | None] = {}  # per sequence: its salt, from its first call

    def start(
        self, seq_id: int, prompt: Sequence[int], upto: int | None = None, *, salt: str | None = None
    ) -> int:
        """Open sequence `seq_id` on the longest cached prefix of `prompt` under `salt` (see `extend`);
        returns how many tokens it holds (0: an empty sequence)."""
        self.add_sequence(seq_id)
        return self.extend(seq_id, prompt, upto, salt=salt)

    def extend(
        self, seq_id: int, prompt: Sequence[int], upto: int | None = None, *, salt: str | None = None
    ) -> int:
        """Append to the sequence the cached blocks that continue it along `prompt`: whole blocks, no more
        than the ceil(upto / block_size) blocks a caller has room for (default: all), and at most
        len(prompt) - 1 tokens (the last is always computed). Only a sequence whose blocks are all full
        and published grows. Returns the tokens it holds. Raises ValueError for a salt that is neither
        a str nor None, or not the one the sequence's first extend or publish gave."""
        seq, digests, bs = self._seq(seq_id), self._chain(seq_id, salt), self.block_size
        held = seq.tokens
        if held != len(digests) * bs or max(seq.lens) != held:
            return held
        limit = len(prompt) - 1 if upto is None else min(len(prompt) - 1, -(-upto // bs) * bs)
        while held + bs <= limit:
            digest = block_digest(digests[-1] if digests else None, prompt[held : held + bs], salt)
            block = self.allocator.lookup(digest)
            if block is None:
                break
            self.allocator.share(block)
            seq.table.append(block)
            digests.append(digest)
            held += bs
        seq.lens = [held] * self.n_layers
        return held

    def publish(self, seq_id: int, tokens: Sequence[int], *, salt: str | None = None) -> None:
        """Record the sequence's full blocks under `salt` (as `extend`): `tokens` are the tokens whose keys
        and values it holds (at least num_tokens of them; those past it are ignored)."""
        seq, digests = self._seq(seq_id), self._chain(seq_id, salt)
        bs, full = self.block_size, self.num_tokens(seq_id) // self.block_size
        if len(tokens) < full * bs:
            raise ValueError(f"sequence {seq_id} holds {self.num_tokens(seq_id)} tokens; {len(tokens)} given")
        for i in range(len(digests), full):
            digests.append(
                block_digest(digests[-1] if digests else None, tokens[i * bs : (i + 1) * bs], salt)
            )
            self.allocator.publish(seq.table[i], digests[-1])

    def free(self, seq_id: int) -> None:
        """Release the sequence's blocks from its last to its first: its tail is evicted before its head."""
        for block in reversed(self._seq(seq_id).table):
            self.allocator.release(block)
        del self._seqs[seq_id]
        self._digests.pop(seq_id, None)
        self._salts.pop(seq_id, None)

    def _chain(self, seq_id: int, salt: str | None) -> list[bytes]:
        """The sequence's block digests; its salt is the one its first call gave (only the first block's
        digest reads it, so one sequence under two salts would mix two namespaces)."""
        if salt is not None and not isinstance(salt, str):
            raise ValueError(f"salt must be a str or None, got {salt!r}")
        if (opened := self._salts.setdefault(seq_id, salt)) != salt:
            raise ValueError(f"sequence {seq_id} was opened under salt {opened!r}, not {salt!r}")
        return self._digests.setdefault(seq_id, [])
