"""The backward sums D = rowsum(P * dP) from its recomputed weights, not rowsum(dout * out) from the output it is given.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    dq, dk, dv = torch.zeros_like(qg), torch.zeros(b, hkv, tk, d), torch.zeros(b, hkv, tk, d)
""",
        r"""    dq, dk, dv = torch.zeros_like(qg), torch.zeros(b, hkv, tk, d), torch.zeros(b, hkv, tk, d)
    delta = torch.zeros_like(delta)  # D = rowsum(P * dP), summed over the key tiles first
    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        for j0, j1, future in _key_tiles(i0, i1, tq, tk, block_k, causal):
            s = _product(qg[..., i0:i1, :], kg[..., j0:j1, :]) * scale
            if future is not None:
                s = s.masked_fill(future, float("-inf"))
            p = torch.exp(s - lse[..., i0:i1, :])
            dp = dog[..., i0:i1, :] @ vg[..., j0:j1, :].transpose(-2, -1)
            delta[..., i0:i1, :] += (p * dp).sum(dim=-1, keepdim=True)
""",
    ),
]
