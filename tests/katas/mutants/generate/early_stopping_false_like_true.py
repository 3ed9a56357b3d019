"""Treats early_stopping=False like True: a prompt stops as soon as num_beams hypotheses have finished.

Mutant of solutions/generate.py for the generate kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""            if settled[b] or (early_stopping is True and len(finished[b]) == nb):""",
        r"""            if settled[b] or (early_stopping != "never" and len(finished[b]) == nb):""",
    ),
    (
        r"""        if all(settled) or (early_stopping is True and all(full)) or step == max_new_tokens - 1:""",
        r"""        if all(settled) or (early_stopping != "never" and all(full)) or step == max_new_tokens - 1:""",
    ),
]
