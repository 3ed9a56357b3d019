"""An independent KV cache, written from the kata's README and stub only: a false-positive fixture for
the similarity measure (tests/dojo/test_similarity.py), and it passes the hidden suite."""

from __future__ import annotations

import torch
from torch import Tensor


class CacheFullError(ValueError):
    """Raised when an update would write past the cache's max_len."""


def _require_sizes(sizes: dict[str, int]) -> None:
    bad = [
        f"{name}={value!r}"
        for name, value in sizes.items()
        if isinstance(value, bool) or not isinstance(value, int) or value < 1
    ]
    if bad:
        raise ValueError("sizes must be positive ints, got " + ", ".join(bad))


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
        _require_sizes(
            dict(
                n_layers=n_layers,
                batch_size=batch_size,
                n_kv_heads=n_kv_heads,
                head_dim=head_dim,
                max_len=max_len,
            )
        )
        total = self.bytes_needed(n_layers, batch_size, n_kv_heads, head_dim, max_len, dtype)
        if max_bytes is not None and total > max_bytes:
            raise ValueError(f"cache would need {total} bytes but max_bytes is {max_bytes}")
        self.shape = (batch_size, n_kv_heads, max_len, head_dim)
        self.dtype = dtype
        self.layers = []
        for _ in range(n_layers):
            keys = torch.empty(self.shape, dtype=dtype, device=device)
            values = torch.empty(self.shape, dtype=dtype, device=device)
            self.layers.append((keys, values))
        self.filled = [0 for _ in range(n_layers)]

    @staticmethod
    def bytes_needed(
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
    ) -> int:
        per_element = (
            torch.finfo(dtype).bits // 8 if dtype.is_floating_point else torch.iinfo(dtype).bits // 8
        )
        return 2 * n_layers * batch_size * n_kv_heads * head_dim * max_len * per_element

    @property
    def length(self) -> int:
        return min(self.filled)

    @property
    def nbytes(self) -> int:
        return sum(k.element_size() * k.nelement() + v.element_size() * v.nelement() for k, v in self.layers)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(self.layers):
            raise ValueError(f"layer {layer} is not in 0..{len(self.layers) - 1}")
        if k.shape != v.shape:
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ in shape")
        if k.dim() != 4:
            raise ValueError(f"k must be 4-D (batch, kv heads, new positions, head_dim), got {k.dim()}-D")
        batch, heads, _, dim = self.shape[0], self.shape[1], self.shape[2], self.shape[3]
        if (k.shape[0], k.shape[1], k.shape[3]) != (batch, heads, dim):
            raise ValueError(f"k has shape {tuple(k.shape)}; want ({batch}, {heads}, T, {dim})")
        if k.dtype != self.dtype or v.dtype != self.dtype:
            raise ValueError(f"k/v dtype {k.dtype}/{v.dtype} is not the cache's {self.dtype}")
        start = self.filled[layer]
        if start > self.length:
            raise ValueError(f"layer {layer} already wrote this pass; other layers are at {self.length}")
        new = k.shape[2]
        if start + new > self.shape[2]:
            raise CacheFullError(f"cache full: {start} cached + {new} new > max_len {self.shape[2]}")
        keys, values = self.layers[layer]
        keys[:, :, start : start + new] = k
        values[:, :, start : start + new] = v
        self.filled[layer] = start + new
        return keys[:, :, : start + new], values[:, :, : start + new]

    def reorder(self, index: Tensor) -> None:
        if not isinstance(index, Tensor) or index.dim() != 1 or index.shape[0] != self.shape[0]:
            raise ValueError(f"index must be a ({self.shape[0]},) tensor")
        if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
            raise ValueError(f"index must hold integers, got {index.dtype}")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.shape[0]):
            raise ValueError(f"index values must lie in [0, {self.shape[0]})")
        for keys, values in self.layers:
            picked_k = keys.index_select(0, index.to(keys.device))
            picked_v = values.index_select(0, index.to(values.device))
            keys.copy_(picked_k)
            values.copy_(picked_v)

    def truncate(self, length: int) -> None:
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"truncate to {length}: must be within 0..{self.length}")
        self.filled = [length for _ in self.filled]
