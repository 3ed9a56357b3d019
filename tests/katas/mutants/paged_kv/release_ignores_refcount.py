"""release puts a block back on the free list at once, even while another sequence still shares it: freeing one fork frees the other's blocks.

Mutant of solutions/paged_kv.py for the paged_kv kata: one realistic bug, the rest unchanged.
"""

EDITS = [
    (
        """        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._free.append(block)""",
        """        self._refs[block] = 0
        self._free.append(block)""",
    ),
]
