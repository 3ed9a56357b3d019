"""A static, preallocated KV cache for autoregressive decoding.

One allocation (2, n_layers, B, H_kv, max_len, D) holds every layer's keys and values. `update`
writes the new positions in place and returns views of the positions cached so far, so decoding
never concatenates or reallocates. It stores the H_kv key/value heads, not the H_q query heads.
`length` moves on only once the last layer has written. Not here: paging (solutions/paged_kv.py),
eviction, sliding windows, quantized storage, per-row lengths.
"""

from __future__ import annotations

import torch
from torch import Tensor


class CacheFullError(ValueError):
    """Raised when an update would write past the cache's max_len."""


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


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
        """Allocate every buffer up front.

        Raises ValueError for a non-positive size, and when `max_bytes` is given and smaller
        than `bytes_needed(...)` (the message names both numbers).
        """
        needed = KVCache.bytes_needed(n_layers, batch_size, n_kv_heads, head_dim, max_len, dtype)
        if max_bytes is not None and needed > max_bytes:
            raise ValueError(
                f"a KV cache of {n_layers} layers x batch {batch_size} x {n_kv_heads} kv heads x "
                f"head_dim {head_dim} x {max_len} positions needs {needed:,} bytes, "
                f"above max_bytes={max_bytes:,}"
            )
        self.n_layers, self.batch_size, self.n_kv_heads = n_layers, batch_size, n_kv_heads
        self.head_dim, self.max_len, self.dtype = head_dim, max_len, dtype
        shape = (2, n_layers, batch_size, n_kv_heads, max_len, head_dim)  # (k|v, L, B, H_kv, max_len, D)
        self._kv = torch.zeros(shape, dtype=dtype, device=device)
        self.k, self.v = list(self._kv[0]), list(self._kv[1])  # per layer: views (B, H_kv, max_len, D)
        self.device = self._kv.device
        self._lens = [0] * n_layers  # positions written per layer

    @staticmethod
    def bytes_needed(
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
    ) -> int:
        """Bytes for keys and values: 2 * n_layers * batch_size * n_kv_heads * head_dim * max_len * itemsize."""
        _check_positive(
            n_layers=n_layers,
            batch_size=batch_size,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            max_len=max_len,
        )
        if not isinstance(dtype, torch.dtype):  # a ValueError, like every bad input in the contract
            raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")  # noqa: TRY004
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * n_layers * batch_size * n_kv_heads * head_dim * max_len * itemsize

    @property
    def length(self) -> int:
        """Positions cached in every layer (moves on after the last layer of a pass writes)."""
        return min(self._lens)

    @property
    def nbytes(self) -> int:
        """Bytes held by the key and value buffers (all of max_len, used or not)."""
        return self._kv.numel() * self._kv.element_size()

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v (B, H_kv, T_new, D) after this layer's cached positions.

        Returns views (not copies) of this layer's keys and values so far, each
        (B, H_kv, length + T_new, D). Raises CacheFullError past max_len, and ValueError for a
        layer out of range, a layer writing twice before the others caught up, or k/v of the
        wrong shape or dtype. (k, v on another device are copied over by the write.)
        """
        if not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer must be an int in [0, {self.n_layers}), got {layer!r}")
        shape = getattr(k, "shape", None)  # (B, H_kv, T_new, D)
        if (  # the fast path: a few comparisons, no tensor ops; _kv_problem says what is wrong
            shape is None
            or len(shape) != 4
            or shape[0] != self.batch_size
            or shape[1] != self.n_kv_heads
            or shape[3] != self.head_dim
            or getattr(v, "shape", None) != shape
            or k.dtype != self.dtype
            or v.dtype != self.dtype
        ):
            raise ValueError(self._kv_problem(k, v))
        start = self._lens[layer]
        if start != self.length:
            raise ValueError(
                f"layer {layer} already holds {start} positions while the cache length is {self.length}: "
                "every layer must write the new positions before any layer writes again"
            )
        end = start + shape[2]
        if end > self.max_len:
            raise CacheFullError(
                f"cache full: {start} positions cached + {shape[2]} new = {end} > max_len {self.max_len}"
            )
        kbuf, vbuf = self.k[layer], self.v[layer]
        kbuf[:, :, start:end] = k  # in place: no new storage
        vbuf[:, :, start:end] = v
        self._lens[layer] = end
        return kbuf[:, :, :end], vbuf[:, :, :end]

    def _kv_problem(self, k, v) -> str:
        """What is wrong with k, v (only called once the fast check has failed)."""
        if not isinstance(k, Tensor) or not isinstance(v, Tensor):
            return f"k and v must be tensors, got {type(k).__name__} and {type(v).__name__}"
        if k.shape != v.shape:
            return f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}"
        B, H, D = self.batch_size, self.n_kv_heads, self.head_dim
        if k.dim() != 4 or k.shape[0] != B or k.shape[1] != H or k.shape[3] != D:
            return f"k and v must be (batch {B}, kv heads {H}, T_new, head_dim {D}), got {tuple(k.shape)}"
        return f"k and v must be {self.dtype} like the cache, got {k.dtype} and {v.dtype}"

    def reorder(self, index: Tensor) -> None:
        """Beam search: row i of every layer becomes old row index[i] (index: (B,) integer tensor).

        Raises ValueError for an index of the wrong shape, dtype or range.
        """
        if not isinstance(index, Tensor) or index.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"index must be an int64 tensor, got {getattr(index, 'dtype', type(index).__name__)}"
            )
        if index.shape != (self.batch_size,):
            raise ValueError(f"index must have shape ({self.batch_size},), got {tuple(index.shape)}")
        if int(index.min()) < 0 or int(index.max()) >= self.batch_size:
            raise ValueError(f"index values must be in [0, {self.batch_size}), got {index.tolist()}")
        index = index.to(device=self.device, dtype=torch.int64)
        n = max(self._lens)  # only the written positions need moving
        written = self._kv[:, :, :, :, :n]  # (2, L, B, H_kv, n, D): every layer's keys and values
        written.copy_(written.index_select(2, index))  # gather copies first, then write in place

    @property
    def storage(self) -> Tensor:
        """The one buffer every layer's views share, (2, n_layers, B, H_kv, max_len, D): for a fused
        step that writes keys and values itself, then calls `advance`."""
        return self._kv

    def advance(self, n: int) -> None:
        """Count n more positions as written in every layer, for a caller that wrote them into
        `storage` itself. Raises ValueError unless every layer holds `length` positions, and
        CacheFullError past max_len."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"advance takes a count >= 0, got {n!r}")
        if max(self._lens) != self.length:
            raise ValueError(f"the layers hold {sorted(set(self._lens))} positions: a pass is half written")
        if self.length + n > self.max_len:
            raise CacheFullError(
                f"cache full: {self.length} positions cached + {n} new > max_len {self.max_len}"
            )
        self._lens = [self.length + n] * self.n_layers

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on (speculative rollback, re-decoding).

        Raises ValueError unless 0 <= length <= self.length.
        """
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"truncate length must be an int in [0, {self.length}], got {length!r}")
        self._lens = [length] * self.n_layers
