"""Unpacks nibbles as interleaved pairs: byte j holds elements 2j and 2j + 1, not j and j + 16.

Mutant of solutions/int4.py for the int4 suite.
"""

EDITS = [
    (
        r"""    out[:, :16] = nib & np.uint8(0x0F)  # element j: low nibble of byte j
    out[:, 16:] = nib >> np.uint8(4)  # element j + 16: high nibble of byte j""",
        r"""    out[:, 0::2] = nib & np.uint8(0x0F)  # element 2j: low nibble of byte j
    out[:, 1::2] = nib >> np.uint8(4)  # element 2j + 1: high nibble of byte j""",
    ),
]
