"""Grows each layer's keys and values with torch.cat every step: a fresh allocation and an O(T) copy per token, not a write in place.

Mutant of solutions/kv_cache.py for the kv_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        shape = (2, n_layers, batch_size, n_kv_heads, max_len, head_dim)  # (k|v, L, B, H_kv, max_len, D)
        self._kv = torch.zeros(shape, dtype=dtype, device=device)
        self.k, self.v = list(self._kv[0]), list(self._kv[1])  # per layer: views (B, H_kv, max_len, D)
        self.device = self._kv.device""",
        r"""        shape = (batch_size, n_kv_heads, 0, head_dim)  # (B, H_kv, 0, D), grown by update
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.device = self.k[0].device""",
    ),
    (
        r"""        return self._kv.numel() * self._kv.element_size()""",
        r"""        return KVCache.bytes_needed(self.n_layers, self.batch_size, self.n_kv_heads, self.head_dim,
                                    self.max_len, self.dtype)""",
    ),
    (
        r"""        kbuf, vbuf = self.k[layer], self.v[layer]
        kbuf[:, :, start:end] = k  # in place: no new storage
        vbuf[:, :, start:end] = v
        self._lens[layer] = end
        return kbuf[:, :, :end], vbuf[:, :, :end]""",
        r"""        self.k[layer] = torch.cat([self.k[layer][:, :, :start], k], dim=2)
        self.v[layer] = torch.cat([self.v[layer][:, :, :start], v], dim=2)
        self._lens[layer] = end
        return self.k[layer], self.v[layer]""",
    ),
    (
        r"""        written = self._kv[:, :, :, :, :n]  # (2, L, B, H_kv, n, D): every layer's keys and values
        written.copy_(written.index_select(2, index))  # gather copies first, then write in place""",
        r"""        self.k = [buf.index_select(0, index) for buf in self.k]
        self.v = [buf.index_select(0, index) for buf in self.v]""",
    ),
]
