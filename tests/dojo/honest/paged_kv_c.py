"""An independent paged KV cache, written from the kata's README and stub only: a false-positive fixture for
the similarity measure (tests/dojo/test_similarity.py), and it passes the hidden suite."""

from __future__ import annotations

import torch
from torch import Tensor


class OutOfBlocksError(RuntimeError):
    """Raised when the pool has fewer free blocks than an allocation needs."""


class BlockAllocator:
    def __init__(self, num_blocks: int) -> None:
        assert_positive("num_blocks", num_blocks)
        self.num_blocks = num_blocks
        self.refs = {b: 0 for b in range(num_blocks)}
        self.free_list = list(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_list)

    def allocate(self) -> int:
        if len(self.free_list) == 0:
            raise OutOfBlocksError("allocate: every block is taken")
        block = self.free_list.pop(0)
        self.refs[block] = 1
        return block

    def refcount(self, block: int) -> int:
        if block not in self.refs or isinstance(block, bool):
            raise ValueError(f"block id {block!r} is outside 0..{self.num_blocks - 1}")
        return self.refs[block]

    def share(self, block: int) -> None:
        if self.refcount(block) < 1:
            raise ValueError(f"cannot share block {block}, it is not allocated")
        self.refs[block] = self.refs[block] + 1

    def release(self, block: int) -> None:
        if self.refcount(block) < 1:
            raise ValueError(f"cannot release block {block}, it is already free")
        self.refs[block] = self.refs[block] - 1
        if self.refs[block] == 0:
            self.free_list.append(block)


def assert_positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int (got {value!r})")


class Sequence:
    def __init__(self, n_layers: int) -> None:
        self.blocks: list[int] = []
        self.per_layer = [0] * n_layers

    @property
    def size(self) -> int:
        return min(self.per_layer)

    def clone(self) -> Sequence:
        other = Sequence(len(self.per_layer))
        other.blocks, other.per_layer = list(self.blocks), list(self.per_layer)
        return other


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
        for name, value in dict(
            n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim, block_size=block_size
        ).items():
            assert_positive(name, value)
        self.allocator = BlockAllocator(num_blocks)
        self.block_size, self.n_layers, self.n_kv_heads, self.head_dim = (
            block_size,
            n_layers,
            n_kv_heads,
            head_dim,
        )
        self.dtype = dtype
        self.K = torch.zeros(
            n_layers, num_blocks, n_kv_heads, block_size, head_dim, dtype=dtype, device=device
        )
        self.V = torch.zeros_like(self.K)
        self.sequences: dict[int, Sequence] = {}

    def lookup(self, seq_id: int) -> Sequence:
        if seq_id not in self.sequences:
            raise ValueError(f"there is no sequence {seq_id!r}")
        return self.sequences[seq_id]

    def add_sequence(self, seq_id: int) -> None:
        if seq_id in self.sequences:
            raise ValueError(f"add_sequence: {seq_id} is already in use")
        self.sequences[seq_id] = Sequence(self.n_layers)

    def fork(self, parent_id: int, child_id: int) -> None:
        parent = self.lookup(parent_id)
        if child_id in self.sequences:
            raise ValueError(f"fork: {child_id} is already in use")
        child = parent.clone()
        for block in child.blocks:
            self.allocator.share(block)
        self.sequences[child_id] = child

    def free(self, seq_id: int) -> None:
        seq = self.lookup(seq_id)
        for block in seq.blocks:
            self.allocator.release(block)
        del self.sequences[seq_id]

    def num_tokens(self, seq_id: int) -> int:
        return self.lookup(seq_id).size

    def block_table(self, seq_id: int) -> list[int]:
        return list(self.lookup(seq_id).blocks)

    @property
    def blocks_in_use(self) -> int:
        return self.allocator.num_blocks - self.allocator.num_free

    def needs_copy(self, seq: Sequence) -> bool:
        at = seq.size // self.block_size
        return (
            seq.size % self.block_size != 0
            and at < len(seq.blocks)
            and self.allocator.refcount(seq.blocks[at]) > 1
        )

    def blocks_needed(self, seq_id: int, new_tokens: int) -> int:
        seq = self.lookup(seq_id)
        assert_positive("new_tokens", new_tokens)
        end = seq.size + new_tokens
        blocks_for_end = end // self.block_size + (1 if end % self.block_size else 0)
        return max(0, blocks_for_end - len(seq.blocks)) + int(self.needs_copy(seq))

    def check_layer(self, layer: int) -> None:
        if not isinstance(layer, int) or layer < 0 or layer >= self.n_layers:
            raise ValueError(f"layer {layer!r} does not exist ({self.n_layers} layers)")

    def update(self, seq_id: int, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        seq = self.lookup(seq_id)
        self.check_layer(layer)
        want = (self.n_kv_heads, self.head_dim)
        if k.shape != v.shape:
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ")
        if len(k.shape) != 3 or (k.shape[0], k.shape[-1]) != want:
            raise ValueError(f"k must be (n_kv_heads={want[0]}, T, head_dim={want[1]}), got {tuple(k.shape)}")
        if k.dtype != self.dtype or v.dtype != self.dtype:
            raise ValueError(f"k, v dtype {k.dtype}/{v.dtype} is not the cache's {self.dtype}")
        start = seq.per_layer[layer]
        if start != seq.size:
            raise ValueError(f"layer {layer} already wrote this pass ({start} > {seq.size})")
        count = k.shape[1]
        needed = self.blocks_needed(seq_id, count)
        if needed > self.allocator.num_free:
            raise OutOfBlocksError(
                f"sequence {seq_id} needs {needed} more block(s), {self.allocator.num_free} free"
            )
        if self.needs_copy(seq):
            at = seq.size // self.block_size
            old, new = seq.blocks[at], self.allocator.allocate()
            self.K[:, new] = self.K[:, old]
            self.V[:, new] = self.V[:, old]
            self.allocator.release(old)
            seq.blocks[at] = new
        while len(seq.blocks) * self.block_size < start + count:
            seq.blocks.append(self.allocator.allocate())
        done = 0
        while done < count:  # one block segment at a time
            pos = start + done
            block, offset = seq.blocks[pos // self.block_size], pos % self.block_size
            n = min(self.block_size - offset, count - done)
            self.K[layer, block, :, offset : offset + n] = k[:, done : done + n]
            self.V[layer, block, :, offset : offset + n] = v[:, done : done + n]
            done += n
        seq.per_layer[layer] = start + count
        return self.gather(seq_id, layer)

    def gather(self, seq_id: int, layer: int) -> tuple[Tensor, Tensor]:
        seq = self.lookup(seq_id)
        self.check_layer(layer)
        length = seq.per_layer[layer]
        ks = [self.K[layer, b] for b in seq.blocks]
        vs = [self.V[layer, b] for b in seq.blocks]
        if not ks:
            z = torch.zeros(self.n_kv_heads, 0, self.head_dim, dtype=self.dtype)
            return z, z.clone()
        return torch.cat(ks, 1)[:, :length], torch.cat(vs, 1)[:, :length]

    def view(self, seq_ids: list[int]) -> PagedView:
        if not seq_ids:
            raise ValueError("view of no sequences")
        if len(set(seq_ids)) < len(seq_ids):
            raise ValueError(f"duplicate ids in {seq_ids}")
        missing = [s for s in seq_ids if s not in self.sequences]
        if missing:
            raise ValueError(f"unknown sequences {missing}")
        return PagedView(self, seq_ids)


class PagedView:
    def __init__(self, cache: PagedKVCache, seq_ids: list[int]) -> None:
        self.cache = cache
        self.seq_ids = list(seq_ids)

    @property
    def length(self) -> int:
        return max(map(self.cache.num_tokens, self.seq_ids))

    def attention_mask(self, new_tokens: int = 1) -> Tensor:
        longest = self.length
        mask = torch.ones(len(self.seq_ids), longest + new_tokens, dtype=torch.bool)
        for row, seq_id in enumerate(self.seq_ids):
            mask[row, : longest - self.cache.num_tokens(seq_id)] = False
        return mask

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if k.dim() != 4 or len(k) != len(self.seq_ids):
            raise ValueError(f"k must have one row per sequence of the view, got {tuple(k.shape)}")
        free = self.cache.allocator.num_free
        total = sum(self.cache.blocks_needed(s, k.shape[2]) for s in self.seq_ids)
        if total > free:
            raise OutOfBlocksError(f"this step needs {total} blocks across the batch, {free} free")
        longest = self.length + k.shape[2]
        out_k = k.new_zeros(k.shape[0], k.shape[1], longest, k.shape[3])
        out_v = v.new_zeros(out_k.shape)
        for row, seq_id in enumerate(self.seq_ids):
            kr, vr = self.cache.update(seq_id, layer, k[row], v[row])
            out_k[row, :, longest - kr.shape[1] :] = kr
            out_v[row, :, longest - vr.shape[1] :] = vr
        return out_k, out_v
