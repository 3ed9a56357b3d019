"""Token choice through the sampling kata's chain, as `dojo demo` decodes.

A `Chooser` picks each step's tokens from the model's logits: the processors of
solutions.sampling.make_chain, then the argmax (greedy) or a seeded draw, and it keeps each step's
logprobs from that processed distribution. `chain_generate` runs it in the generate kata's loop.
Not here: beam search (the generate kata's own), stop strings (the caller's StopChecker).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType

import torch
from torch import Tensor

import solutions.sampling
from solutions.generate import GenerationResult, _generate_choosing
from solutions.sampling import Sampled, Temperature


class Chooser:
    """`chooser(logits (B, V)) -> (B,)` for prompts `prompts`: the chain's processors see each row's
    prompt and the tokens this chooser picked for it so far. `steps[i]` is step i's Sampled. `sampling`
    is the module whose apply_chain and sample run (a learner's passed kata; default the reference).
    Raises ValueError for a bad top_logprobs (on the first call, as `sample` does)."""

    def __init__(
        self,
        chain: Sequence,
        prompts: Sequence[Sequence[int]],
        *,
        greedy: bool,
        seed: int | None = None,
        top_logprobs: int = 0,
        sampling: ModuleType = solutions.sampling,
    ):
        self.chain, self.prompts, self.greedy, self.top_logprobs = list(chain), prompts, greedy, top_logprobs
        self.sampling = sampling
        self.outputs: list[list[int]] = [[] for _ in prompts]
        self.steps: list[Sampled] = []
        self.generator = torch.Generator()  # our own: the global RNG is never touched
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    def __call__(self, logits: Tensor) -> Tensor:
        args = (self.chain, self.prompts, self.outputs, logits)
        step = (
            _argmax(self.sampling.apply_chain, *args, self.top_logprobs)
            if self.greedy
            else self.sampling.sample(*args, self.generator, self.top_logprobs)
        )
        self.record(step)
        return step.tokens

    def record(self, step: Sampled) -> None:
        """Keep `step` as this chooser's next: its tokens join each row's outputs, which the chain reads."""
        for output, token in zip(self.outputs, step.tokens.tolist()):
            output.append(token)  # a finished row's picks grow too; the generator ignores them
        self.steps.append(step)

    def plain_greedy(self) -> bool:
        """Whether this chooser's pick is the argmax of its one row's logits as they are (what
        choose_each batches): greedy, one prompt, no processor but temperature 1, no top_logprobs."""
        return (
            self.greedy
            and len(self.prompts) == 1
            and self.top_logprobs == 0
            and self.sampling is solutions.sampling
            and all(type(p) is Temperature and p.temperature == 1.0 for p in self.chain)
        )


def choose_each(choosers: Sequence[Chooser], rows: Sequence[Tensor]) -> list[int]:
    """Chooser i's token for its logits rows[i] (V,), with the tokens and Sampled that calling each
    on its row gives: the rows of plain greedy choosers (one prompt, no processor but temperature 1,
    no top_logprobs, the reference sampling module) go through one argmax together, the rest one
    call each. For a batch of requests, each with its own chooser."""
    plain = [i for i, c in enumerate(choosers) if c.plain_greedy()]
    picked: dict[int, int] = {}
    if len(plain) > 1:
        prompts, outputs = [choosers[i].prompts[0] for i in plain], [choosers[i].outputs[0] for i in plain]
        step = _argmax(
            solutions.sampling.apply_chain, [], prompts, outputs, torch.stack([rows[i] for i in plain]), 0
        )
        for j, i in enumerate(plain):
            one = Sampled(
                step.tokens[j : j + 1],
                step.logprobs[j : j + 1],
                step.top_ids[j : j + 1],
                step.top_logprobs[j : j + 1],
            )
            choosers[i].record(one)
            picked[i] = int(one.tokens[0])
    for i, chooser in enumerate(choosers):
        if i not in picked:
            picked[i] = int(chooser(rows[i][None])[0])
    return [picked[i] for i in range(len(choosers))]


def _argmax(apply_chain, chain, prompt_ids, output_ids, logits: Tensor, top_logprobs: int) -> Sampled:
    """Greedy's Sampled: the argmax of the processed logits (the first on ties, as generate's greedy)."""
    logits = apply_chain(chain, prompt_ids, output_ids, logits).float()  # (B, V)
    V = logits.shape[-1]
    if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= V:
        raise ValueError(f"top_logprobs must be an int in [0, {V}], got {top_logprobs!r}")
    tokens = logits.argmax(dim=-1)  # (B,)
    logp = logits.log_softmax(dim=-1)
    if top_logprobs == 0:  # the usual case: no sort of the whole vocabulary
        none = torch.empty((logits.shape[0], 0))
        return Sampled(tokens, logp.gather(1, tokens[:, None])[:, 0], none.long(), none)
    sorted_logp, order = logp.sort(dim=-1, descending=True, stable=True)  # ties: lower id first
    return Sampled(
        tokens, logp.gather(1, tokens[:, None])[:, 0], order[:, :top_logprobs], sorted_logp[:, :top_logprobs]
    )


def chain_generate(
    model,
    prompts: list[list[int]],
    chooser: Chooser,
    *,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    on_token: Callable[[int, int], None] | None = None,
) -> GenerationResult:
    """generate()'s greedy/sample loop with every token from `chooser` (built for these `prompts`).
    Raises ValueError as solutions.generate.generate does, or for a chooser built for other prompts."""
    if [list(p) for p in chooser.prompts] != [list(p) for p in prompts] or chooser.steps:
        raise ValueError("the chooser must be new and built for these prompts (its penalties read them)")
    return _generate_choosing(
        model, prompts, chooser, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, on_token=on_token
    )


def describe_chain(chain: Sequence) -> str:
    """The processors in order with their settings, e.g. 'RepetitionPenalty(penalty=1.2) -> Temperature(...)'."""
    return " -> ".join(
        f"{type(p).__name__}({', '.join(f'{k}={v:g}' if isinstance(v, float) else f'{k}={v!r}' for k, v in vars(p).items())})"
        for p in chain
    )
