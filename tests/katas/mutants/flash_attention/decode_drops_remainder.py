"""flash_decode cuts Tk // splits keys per split and drops the Tk % splits keys left over.

Mutant of solutions/flash_attention.py for the flash_attention kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""        for ks, vs in zip(k.tensor_split(splits, dim=2), v.tensor_split(splits, dim=2))""",
        r"""        for ks, vs in (
            (k[:, :, s * (tk // splits) : (s + 1) * (tk // splits)], v[:, :, s * (tk // splits) : (s + 1) * (tk // splits)])
            for s in range(splits)
        )""",
    ),
]
