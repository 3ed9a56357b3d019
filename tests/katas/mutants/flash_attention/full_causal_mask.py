"""The causal mask is built once as a (Tq, Tk) matrix and sliced per tile: memory O(Tq x Tk) again.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)""",
        r"""    hidden = torch.arange(tk).unsqueeze(0) > torch.arange(tq).unsqueeze(1) + (tk - tq)  # (Tq, Tk)
    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)""",
    ),
    (
        r"""            if future is not None:
                s = s.masked_fill(future, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))""",
        r"""            if future is not None:
                s = s.masked_fill(hidden[i0:i1, j0:j1], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))""",
    ),
]
