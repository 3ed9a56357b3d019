"""Expands KV heads with repeat (tiles: query head h reads KV head h % Hkv) instead of repeat_interleave.

Mutant of solutions/decoder_block.py for the decoder_block kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        r"""    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)""",
        r"""    k = k.repeat(1, group, 1, 1)
    v = v.repeat(1, group, 1, 1)""",
    ),
]
