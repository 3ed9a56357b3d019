"""sample reports logprobs of the raw logits, not of the processed distribution it drew from.

Mutant of solutions/sampling.py for the sampling kata: the reference with this one bug.
"""

EDITS = [
    (
        r"""    logits = apply_chain(chain, prompt_ids, output_ids, logits)  # (B, V)
    V = logits.shape[-1]""",
        r"""    raw, logits = logits, apply_chain(chain, prompt_ids, output_ids, logits)  # (B, V)
    V = logits.shape[-1]""",
    ),
    (
        r"""    tokens = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]  # (B,)""",
        r"""    tokens = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]  # (B,)
    logp = raw.float().log_softmax(dim=-1)""",
    ),
]
