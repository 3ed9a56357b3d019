"""An independent paged KV cache, written from the kata's README and stub only: a false-positive fixture for
the similarity measure (tests/dojo/test_similarity.py), and it passes the hidden suite."""

from __future__ import annotations

import heapq
import math

import torch
from torch import Tensor


class OutOfBlocksError(RuntimeError):
    """Raised when the pool has fewer free blocks than an allocation needs."""


class BlockAllocator:
    """Lowest free id first (a heap), so a fresh pool fills in order."""

    def __init__(self, num_blocks: int) -> None:
        if type(num_blocks) is not int or num_blocks < 1:
            raise ValueError("num_blocks must be >= 1")
        self.num_blocks = num_blocks
        self.heap = list(range(num_blocks))
        self.rc = [0] * num_blocks

    @property
    def num_free(self) -> int:
        return len(self.heap)

    def allocate(self) -> int:
        try:
            b = heapq.heappop(self.heap)
        except IndexError:
            raise OutOfBlocksError(f"out of KV blocks (0 of {self.num_blocks} free)") from None
        self.rc[b] = 1
        return b

    def refcount(self, block: int) -> int:
        if type(block) is not int or not (0 <= block < self.num_blocks):
            raise ValueError(f"bad block id {block!r}")
        return self.rc[block]

    def share(self, block: int) -> None:
        if self.refcount(block) == 0:
            raise ValueError(f"share of free block {block}")
        self.rc[block] += 1

    def release(self, block: int) -> None:
        if self.refcount(block) == 0:
            raise ValueError(f"double free of block {block}")
        self.rc[block] -= 1
        if self.rc[block] == 0:
            heapq.heappush(self.heap, block)


class PagedKVCache:
    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        num_blocks: int,
        block_size: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        self.allocator = BlockAllocator(num_blocks)
        self.block_size = block_size
        self.shape = (n_layers, n_kv_heads, head_dim)
        self.dtype = dtype
        # slot-major storage: (layers, k/v, num_blocks * block_size, heads, dim)
        self.store = torch.zeros(
            n_layers, 2, num_blocks * block_size, n_kv_heads, head_dim, dtype=dtype, device=device
        )
        self.seqs: dict[int, dict] = {}

    def _seq(self, seq_id):
        s = self.seqs.get(seq_id) if isinstance(seq_id, int) else None
        if s is None:
            raise ValueError(f"sequence {seq_id!r} does not exist")
        return s

    def _layer(self, layer) -> None:
        if type(layer) is not int or not (0 <= layer < self.shape[0]):
            raise ValueError(f"layer {layer!r} is not in 0..{self.shape[0] - 1}")

    def add_sequence(self, seq_id: int) -> None:
        if seq_id in self.seqs:
            raise ValueError(f"sequence {seq_id} exists already")
        self.seqs[seq_id] = {"blocks": [], "written": [0] * self.shape[0]}

    def fork(self, parent_id: int, child_id: int) -> None:
        p = self._seq(parent_id)
        self.add_sequence(child_id)
        for b in p["blocks"]:
            self.allocator.share(b)
        self.seqs[child_id] = {"blocks": list(p["blocks"]), "written": list(p["written"])}

    def free(self, seq_id: int) -> None:
        s = self._seq(seq_id)
        for b in s["blocks"]:
            self.allocator.release(b)
        self.seqs.pop(seq_id)

    def num_tokens(self, seq_id: int) -> int:
        return min(self._seq(seq_id)["written"])

    def block_table(self, seq_id: int) -> list[int]:
        return self._seq(seq_id)["blocks"].copy()

    @property
    def blocks_in_use(self) -> int:
        return sum(1 for c in self.allocator.rc if c)

    def _shared_target(self, s) -> int | None:
        """Index in the table of the block the next position falls in, when that block is shared."""
        n = min(s["written"])
        i = n // self.block_size
        if i < len(s["blocks"]) and self.allocator.rc[s["blocks"][i]] > 1:
            return i
        return None

    def blocks_needed(self, seq_id: int, new_tokens: int) -> int:
        s = self._seq(seq_id)
        want = math.ceil((min(s["written"]) + new_tokens) / self.block_size)
        return max(0, want - len(s["blocks"])) + (self._shared_target(s) is not None)

    def _slots(self, blocks: list[int], lo: int, hi: int) -> Tensor:
        p = torch.arange(lo, hi)
        return (
            torch.tensor(blocks, dtype=torch.long)[p // self.block_size] * self.block_size
            + p % self.block_size
        )

    def update(self, seq_id: int, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        s = self._seq(seq_id)
        self._layer(layer)
        _, h, d = self.shape
        if not (isinstance(k, Tensor) and isinstance(v, Tensor)) or k.shape != v.shape:
            raise ValueError("k and v need the same shape")
        if k.ndim != 3 or (k.shape[0], k.shape[2]) != (h, d):
            raise ValueError(f"k, v must be ({h}, T, {d}); got {tuple(k.shape)}")
        if (k.dtype, v.dtype) != (self.dtype, self.dtype):
            raise ValueError(f"k, v must be {self.dtype}")
        lo = s["written"][layer]
        if lo > min(s["written"]):
            raise ValueError(f"layer {layer} wrote twice in one pass")
        hi = lo + k.shape[1]
        need = self.blocks_needed(seq_id, hi - lo)
        if need > self.allocator.num_free:
            raise OutOfBlocksError(
                f"seq {seq_id} needs {need} blocks but only {self.allocator.num_free} are free"
            )
        i = self._shared_target(s)
        if i is not None:
            new = self.allocator.allocate()
            src = slice(s["blocks"][i] * self.block_size, (s["blocks"][i] + 1) * self.block_size)
            self.store[:, :, new * self.block_size : (new + 1) * self.block_size] = self.store[:, :, src]
            self.allocator.release(s["blocks"][i])
            s["blocks"][i] = new
        while len(s["blocks"]) * self.block_size < hi:
            s["blocks"].append(self.allocator.allocate())
        slots = self._slots(s["blocks"], lo, hi)
        self.store[layer, 0].index_copy_(0, slots, k.permute(1, 0, 2))
        self.store[layer, 1].index_copy_(0, slots, v.permute(1, 0, 2))
        s["written"][layer] = hi
        return self.gather(seq_id, layer)

    def gather(self, seq_id: int, layer: int) -> tuple[Tensor, Tensor]:
        s = self._seq(seq_id)
        self._layer(layer)
        slots = self._slots(s["blocks"], 0, s["written"][layer])
        both = self.store[layer].index_select(1, slots)  # (2, n, heads, dim)
        return both[0].permute(1, 0, 2), both[1].permute(1, 0, 2)

    def view(self, seq_ids: list[int]) -> PagedView:
        if len(seq_ids) == 0:
            raise ValueError("empty view")
        seen = set()
        for x in seq_ids:
            self._seq(x)
            if x in seen:
                raise ValueError(f"sequence {x} twice in one view")
            seen.add(x)
        return PagedView(self, list(seq_ids))


class PagedView:
    def __init__(self, cache: PagedKVCache, seq_ids: list[int]) -> None:
        self.cache, self.seq_ids = cache, seq_ids

    def _lengths(self) -> list[int]:
        return [self.cache.num_tokens(x) for x in self.seq_ids]

    @property
    def length(self) -> int:
        return max(self._lengths())

    def attention_mask(self, new_tokens: int = 1) -> Tensor:
        lens = torch.tensor(self._lengths())
        total = int(lens.max()) + new_tokens
        cols = torch.arange(total).expand(len(self.seq_ids), total)
        return cols >= (total - new_tokens - lens).unsqueeze(1)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        b = len(self.seq_ids)
        if k.ndim != 4 or k.shape[0] != b or v.shape != k.shape:
            raise ValueError(f"k, v must be ({b}, heads, T, dim)")
        t = k.shape[2]
        need = sum(self.cache.blocks_needed(x, t) for x in self.seq_ids)
        if need > self.cache.allocator.num_free:
            raise OutOfBlocksError(f"step needs {need} blocks; {self.cache.allocator.num_free} free")
        width = self.length + t
        out_k = torch.zeros(b, k.shape[1], width, k.shape[3], dtype=k.dtype)
        out_v = torch.zeros_like(out_k)
        for r, x in enumerate(self.seq_ids):
            kk, vv = self.cache.update(x, layer, k[r], v[r])
            out_k[r, :, width - kk.shape[1] :] = kk
            out_v[r, :, width - vv.shape[1] :] = vv
        return out_k, out_v
