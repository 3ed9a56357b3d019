"""Splits heads with .view(B, H, T, Dh) instead of .view(B, T, H, Dh).transpose(1, 2), mixing positions and heads.

Mutant of solutions/attention.py for the attention kata suite: one realistic bug.
"""

EDITS = [
    (
        r"""        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, Hq, T, Dh)
        k = self.k_proj(source).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, S, Dh)
        v = self.v_proj(source).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, S, Dh)""",
        r"""        q = self.q_proj(x).view(b, self.n_heads, t, self.head_dim)  # (B, Hq, T, Dh)
        k = self.k_proj(source).view(b, self.n_kv_heads, s, self.head_dim)  # (B, Hkv, S, Dh)
        v = self.v_proj(source).view(b, self.n_kv_heads, s, self.head_dim)  # (B, Hkv, S, Dh)""",
    ),
    (
        r"""        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))  # (B, T, d_model)""",
        r"""        return self.o_proj(out.reshape(b, t, -1))  # (B, T, d_model)""",
    ),
]
