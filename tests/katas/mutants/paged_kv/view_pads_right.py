"""The batch view puts each shorter row's positions first and the padding after them (right padding), where the mask says left.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        """            k_all[i, :, width - rk.shape[1]:] = rk
            v_all[i, :, width - rv.shape[1]:] = rv""",
        """            k_all[i, :, :rk.shape[1]] = rk
            v_all[i, :, :rv.shape[1]] = rv""",
    ),
]
