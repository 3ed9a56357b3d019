"""Runs each chunk as a prompt of its own: later chunks cannot attend to earlier ones.

Mutant of solutions/latency.py for the latency suite.
"""

EDITS = [
    (
        r"""        logits.append(model.prefill(ids[:, lo:hi], cache, mask))  # (B, hi - lo, V)""",
        r"""        logits.append(model(ids[:, lo:hi]))  # (B, hi - lo, V): a fresh prompt, no cache""",
    ),
]
