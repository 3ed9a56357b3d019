"""Kata: a KV cache for autoregressive decoding (one buffer pair per layer)."""

from __future__ import annotations

import torch
from torch import Tensor


class CacheFullError(ValueError):
    """Raised when an update would write past the cache's max_len."""


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class KVCache:
    """Per-layer key/value buffers of shape (batch_size, n_kv_heads, max_len, head_dim)."""

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
        self.n_layers = _positive_int("n_layers", n_layers)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.n_kv_heads = _positive_int("n_kv_heads", n_kv_heads)
        self.head_dim = _positive_int("head_dim", head_dim)
        self.max_len = _positive_int("max_len", max_len)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
        self.dtype = dtype
        self.device = torch.device(device)
        need = self.bytes_needed(n_layers, batch_size, n_kv_heads, head_dim, max_len, dtype)
        if max_bytes is not None and max_bytes < need:
            raise ValueError(f"cache needs {need} bytes but max_bytes is {max_bytes}")
        shape = (batch_size, n_kv_heads, max_len, head_dim)
        self.k_cache: list[Tensor] = []
        self.v_cache: list[Tensor] = []
        for _ in range(n_layers):
            self.k_cache.append(torch.zeros(shape, dtype=dtype, device=self.device))
            self.v_cache.append(torch.zeros(shape, dtype=dtype, device=self.device))
        self._filled = [0] * n_layers  # positions written, per layer

    @staticmethod
    def bytes_needed(
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
    ) -> int:
        return 2 * n_layers * batch_size * n_kv_heads * head_dim * max_len * _itemsize(dtype)

    @property
    def length(self) -> int:
        return min(self._filled)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k_cache + self.v_cache)

    def _check_kv(self, k, v) -> None:
        if not isinstance(k, Tensor) or not isinstance(v, Tensor):
            raise ValueError("k and v must be tensors")
        if k.dim() != 4 or v.dim() != 4:
            raise ValueError(f"k and v must be 4-D, got k {tuple(k.shape)}, v {tuple(v.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} have different shapes")
        b, h, _, d = k.shape
        if b != self.batch_size:
            raise ValueError(f"batch size {b} != cache batch size {self.batch_size}")
        if h != self.n_kv_heads:
            raise ValueError(f"{h} heads != cache n_kv_heads {self.n_kv_heads}")
        if d != self.head_dim:
            raise ValueError(f"head_dim {d} != cache head_dim {self.head_dim}")
        if k.dtype != self.dtype or v.dtype != self.dtype:
            raise ValueError(f"dtype k {k.dtype}, v {v.dtype} != cache dtype {self.dtype}")

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer {layer!r} outside [0, {self.n_layers})")
        self._check_kv(k, v)
        start = self._filled[layer]
        if start > self.length:
            raise ValueError(
                f"layer {layer} already holds {start} positions, more than length {self.length}: "
                "it wrote twice before the other layers caught up"
            )
        t_new = k.shape[2]
        if start + t_new > self.max_len:
            raise CacheFullError(
                f"cache full: length {start} + {t_new} new positions > max_len {self.max_len}"
            )
        end = start + t_new
        self.k_cache[layer][:, :, start:end] = k
        self.v_cache[layer][:, :, start:end] = v
        self._filled[layer] = end
        return self.k_cache[layer][:, :, :end], self.v_cache[layer][:, :, :end]

    def reorder(self, index: Tensor) -> None:
        if not isinstance(index, Tensor):
            raise ValueError(f"index must be a tensor, got {type(index).__name__}")
        if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
            raise ValueError(f"index must be an integer tensor, got {index.dtype}")
        if tuple(index.shape) != (self.batch_size,):
            raise ValueError(f"index must have shape ({self.batch_size},), got {tuple(index.shape)}")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.batch_size):
            raise ValueError(f"index values must be in [0, {self.batch_size}), got {index.tolist()}")
        idx = index.to(device=self.device, dtype=torch.long)
        for buf in self.k_cache + self.v_cache:
            buf.copy_(buf.index_select(0, idx))

    def truncate(self, length: int) -> None:
        if isinstance(length, bool) or not isinstance(length, int):
            raise ValueError(f"length must be an int, got {length!r}")
        if not 0 <= length <= self.length:
            raise ValueError(f"length {length} outside 0 .. {self.length}")
        self._filled = [length] * self.n_layers
