"""Kata: a KV cache backed by one contiguous allocation for all layers."""

from __future__ import annotations

import operator

import torch
from torch import Tensor


class CacheFullError(ValueError):
    """Raised when an update would write past the cache's max_len."""


class KVCache:
    """All layers' keys and values in one tensor of shape
    (n_layers, 2, batch_size, n_kv_heads, max_len, head_dim)."""

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        max_bytes: int | None = None,
    ) -> None:
        dims = dict(
            n_layers=n_layers,
            batch_size=batch_size,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            max_len=max_len,
        )
        for key, val in dims.items():
            try:
                ival = operator.index(val)
            except TypeError:
                raise ValueError(f"{key} must be an int, got {val!r}") from None
            if isinstance(val, bool) or ival < 1:
                raise ValueError(f"{key} must be positive, got {val!r}")
        needed = KVCache.bytes_needed(n_layers, batch_size, n_kv_heads, head_dim, max_len, dtype)
        if max_bytes is not None and needed > max_bytes:
            raise ValueError(f"KV cache of {needed} bytes exceeds max_bytes={max_bytes}")
        self.n_layers, self.batch_size, self.n_kv_heads = n_layers, batch_size, n_kv_heads
        self.head_dim, self.max_len, self.dtype = head_dim, max_len, dtype
        self.storage = torch.empty(
            (n_layers, 2, batch_size, n_kv_heads, max_len, head_dim), dtype=dtype, device=device
        )
        self.device = self.storage.device
        self._pos = torch.zeros(n_layers, dtype=torch.long).tolist()  # per-layer write cursor

    @staticmethod
    def bytes_needed(
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
    ) -> int:
        per_elem = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else torch.iinfo(dtype).bits // 8
        return 2 * n_layers * batch_size * n_kv_heads * head_dim * max_len * per_elem

    @property
    def length(self) -> int:
        return min(self._pos)

    @property
    def nbytes(self) -> int:
        return self.storage.numel() * self.storage.element_size()

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if not isinstance(layer, int) or isinstance(layer, bool) or layer < 0 or layer >= self.n_layers:
            raise ValueError(f"layer must be in [0, {self.n_layers}), got {layer!r}")
        problems = []
        if not (isinstance(k, Tensor) and isinstance(v, Tensor)):
            raise ValueError("k and v must be torch tensors")
        if k.ndim != 4 or v.ndim != 4:
            problems.append(f"k and v must be 4-D (got {k.ndim}-D and {v.ndim}-D)")
        elif k.shape != v.shape:
            problems.append(f"k shape {tuple(k.shape)} differs from v shape {tuple(v.shape)}")
        else:
            want = (self.batch_size, self.n_kv_heads, k.shape[2], self.head_dim)
            names = ("batch size", "kv head count", None, "head_dim")
            for name, got, exp in zip(names, k.shape, want):
                if name and got != exp:
                    problems.append(f"wrong {name}: got {got}, expected {exp}")
        if not problems and (k.dtype != self.dtype or v.dtype != self.dtype):
            problems.append(f"dtype must be {self.dtype}, got k {k.dtype} and v {v.dtype}")
        if problems:
            raise ValueError("; ".join(problems))

        cur = self.length
        if self._pos[layer] != cur:
            raise ValueError(
                f"layer {layer} has already written this pass ({self._pos[layer]} positions cached, "
                f"length is {cur})"
            )
        n = k.shape[2]
        if cur + n > self.max_len:
            raise CacheFullError(
                f"cannot add {n} positions to {cur} cached: {cur + n} > max_len {self.max_len}"
            )
        keys, values = self.storage[layer, 0], self.storage[layer, 1]
        keys[:, :, cur : cur + n].copy_(k)
        values[:, :, cur : cur + n].copy_(v)
        self._pos[layer] = cur + n
        return keys[:, :, : cur + n], values[:, :, : cur + n]

    def reorder(self, index: Tensor) -> None:
        if not torch.is_tensor(index):
            raise ValueError("index must be a tensor")
        if index.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
            raise ValueError(f"index must have an integer dtype, not {index.dtype}")
        if index.shape != (self.batch_size,):
            raise ValueError(f"index shape {tuple(index.shape)} != ({self.batch_size},)")
        bad = (index < 0) | (index >= self.batch_size)
        if bool(bad.any()):
            raise ValueError(f"index values {index[bad].tolist()} are outside [0, {self.batch_size})")
        gathered = self.storage[:, :, index.to(self.device, torch.long)]
        self.storage.copy_(gathered)

    def truncate(self, length: int) -> None:
        try:
            length = operator.index(length)
        except TypeError:
            raise ValueError(f"length must be an int, got {length!r}") from None
        if length < 0 or length > self.length:
            raise ValueError(f"cannot truncate to {length}: must be within 0 .. {self.length}")
        self._pos = [length for _ in self._pos]
