"""fork writes the child's entry without checking the id: forking onto an existing sequence replaces it (and leaks its blocks) instead of raising ValueError.

Mutant of solutions/paged_kv.py for the paged_kv suite.
"""

EDITS = [
    (
        """        self.add_sequence(child_id)
        for block in parent.table:""",
        """        for block in parent.table:""",
    ),
]
