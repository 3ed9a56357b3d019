"""Starts the TTFT clock after the prefill: the user waits for the prompt to be read too.

Mutant of solutions/latency.py for the latency suite.
"""

EDITS = [
    (
        r"""        start = time.perf_counter()
        token = model.prefill(prompt, cache)[:, -1].argmax(-1)  # (1,)""",
        r"""        token = model.prefill(prompt, cache)[:, -1].argmax(-1)  # (1,)
        start = time.perf_counter()""",
    ),
]
