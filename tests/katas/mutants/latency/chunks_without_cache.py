"""Runs each chunk as a prompt of its own: later chunks cannot attend to earlier ones.

Mutant of the latency reference; the rest of its docstring follows.
Prefill vs decode latency: time to first token, time per output token, and chunked prefill.

A request's first token waits for the prefill of the whole prompt: P tokens through every
weight, 2 FLOPs per weight per token, so time to first token (TTFT) grows with P and, past a few
dozen tokens, is compute-bound. Every later token is one decode step: all the weights read for
one token, bandwidth-bound, so time per output token (TPOT) barely depends on the prompt (only
through the KV cache it reads). "Slow to start, then quick" on long documents is exactly this.
The roofline predicts both: a pass takes max(FLOPs / peak, bytes / bandwidth).

Chunked prefill feeds the prompt to the KV cache `chunk` tokens at a time, so no single step does
more than `chunk` tokens of work (a server can interleave other requests' decode steps between
chunks) while the logits stay exactly those of a one-shot prefill.
Left out: batching several requests (the batching kata), sampling (greedy only), queueing delay,
tokenization and network time, and the scheduler that would interleave the chunks.
"""

EDITS = [
    (
        r"""        logits.append(model.prefill(ids[:, lo:hi], cache, mask))  # (B, hi - lo, V)""",
        r"""        logits.append(model(ids[:, lo:hi]))  # (B, hi - lo, V): a fresh prompt, no cache""",
    ),
]
