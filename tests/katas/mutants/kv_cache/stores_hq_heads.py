"""Sizes the buffers from the first k it sees and never checks its head count: keys expanded to the Hq query heads get cached, Hq/Hkv times the memory.

Mutant of solutions/kv_cache.py for the kv_cache kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        shape = (2, n_layers, batch_size, n_kv_heads, max_len, head_dim)  # (k|v, L, B, H_kv, max_len, D)
        self._kv = torch.zeros(shape, dtype=dtype, device=device)
        self.k, self.v = list(self._kv[0]), list(self._kv[1])  # per layer: views (B, H_kv, max_len, D)
        self.device = self._kv.device""",
        r"""        self.device = torch.empty(0, device=device).device
        self.k: list = [None] * n_layers  # allocated on first update, from k's shape
        self.v: list = [None] * n_layers""",
    ),
    (
        r"""        return self._kv.numel() * self._kv.element_size()""",
        r"""        return sum(t.numel() * t.element_size() for t in self.k + self.v if t is not None)""",
    ),
    (
        r"""            or shape[0] != self.batch_size
            or shape[1] != self.n_kv_heads
""",
        r"""            or shape[0] != self.batch_size
""",
    ),
    (
        r"""        kbuf, vbuf = self.k[layer], self.v[layer]
""",
        r"""        if self.k[layer] is None:
            full = (self.batch_size, k.shape[1], self.max_len, self.head_dim)  # heads from k
            self.k[layer] = torch.zeros(full, dtype=self.dtype, device=self.device)
            self.v[layer] = torch.zeros(full, dtype=self.dtype, device=self.device)
        kbuf, vbuf = self.k[layer], self.v[layer]
""",
    ),
    (
        r'''        B, H, D = self.batch_size, self.n_kv_heads, self.head_dim
        if k.dim() != 4 or k.shape[0] != B or k.shape[1] != H or k.shape[3] != D:
            return f"k and v must be (batch {B}, kv heads {H}, T_new, head_dim {D}), got {tuple(k.shape)}"''',
        r'''        B, D = self.batch_size, self.head_dim
        if k.dim() != 4 or k.shape[0] != B or k.shape[3] != D:
            return f"k and v must be (batch {B}, heads, T_new, head_dim {D}), got {tuple(k.shape)}"''',
    ),
    (
        r"""        written = self._kv[:, :, :, :, :n]  # (2, L, B, H_kv, n, D): every layer's keys and values
        written.copy_(written.index_select(2, index))  # gather copies first, then write in place""",
        r"""        for buf in (b for b in self.k + self.v if b is not None):
            buf[:, :, :n] = buf[:, :, :n].index_select(0, index)""",
    ),
]
