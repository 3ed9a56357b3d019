"""Decodes with errors='ignore': invalid UTF-8 bytes vanish instead of becoming U+FFFD.

Mutant of solutions/bpe.py for the bpe suite.
"""

EDITS = [
    (
        r"""        return data.decode("utf-8", errors="replace")""",
        r"""        return data.decode("utf-8", errors="ignore")""",
    ),
]
