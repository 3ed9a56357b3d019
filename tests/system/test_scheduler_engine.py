"""The scheduler reference drives a real model: its plans mean what the README says to an engine.

A minimal engine on the tiny random Llama, one contiguous cache per request (paging is the engine's
business, not the plan's): each chunk is a `model.prefill` of its ids on the request's cache, which
must hold exactly `chunk.start` positions; a preempted request's cache is truncated to 0; a chunk
that samples gives the argmax of its last position. Every request must get the greedy tokens it
gets alone, with a cache small enough to preempt and a budget small enough to chunk.
"""

from __future__ import annotations

import torch

from solutions.model import tiny_model
from solutions.scheduler import Scheduler, SchedulerConfig


def greedy_alone(model, prompt: list[int], new: int) -> list[int]:
    cache = model.new_cache(1, len(prompt) + new)
    token = model.prefill(torch.tensor([prompt]), cache)[0, -1].argmax()
    out = [int(token)]
    while len(out) < new:
        token = model.decode_step(token.view(1), cache)[0].argmax()
        out.append(int(token))
    return out


def test_scheduler_plans_drive_a_real_model_to_each_requests_greedy_tokens():
    """Scheduler + tiny Llama: chunked, batched and preempted requests get their greedy tokens alone"""
    torch.manual_seed(0)
    model = tiny_model(seed=3)
    g = torch.Generator().manual_seed(1)
    prompts = {
        f"r{i}": torch.randint(256, (int(n),), generator=g).tolist()
        for i, n in enumerate([9, 3, 14, 5, 2, 7])
    }
    new = {rid: 4 + i % 3 for i, rid in enumerate(prompts)}
    sched = Scheduler(SchedulerConfig(max_tokens_per_step=6, num_blocks=10, block_size=2))
    caches, got, preemptions = {}, {}, 0
    for step in range(200):
        if step < len(prompts):  # one arrival a step
            rid = f"r{step}"
            sched.add(rid, prompts[rid], new[rid], float(step))
            caches[rid] = model.new_cache(1, len(prompts[rid]) + new[rid])
        if not sched.pending and step >= len(prompts):
            break
        plan = sched.step()
        preemptions += len(plan.preempted)
        for rid in plan.preempted:
            caches[rid].truncate(0)
        outputs = {}
        with torch.inference_mode():
            for chunk in plan.prefills + plan.decodes:
                cache = caches[chunk.request_id]
                assert cache.length == chunk.start, (
                    f"step {step}: {chunk} on a cache of {cache.length} positions"
                )
                logits = model.prefill(torch.tensor([list(chunk.ids)]), cache)
                if chunk.sample:
                    outputs[chunk.request_id] = int(logits[0, -1].argmax())
        for done in sched.complete(outputs, now=float(step + 1)):
            got[done.request_id] = list(done.tokens)
    assert preemptions > 0, "the cache was meant to be small enough to preempt"
    for rid, prompt in prompts.items():
        assert got[rid] == greedy_alone(model, prompt, new[rid]), (
            f"{rid}: {got.get(rid)} vs its greedy tokens alone"
        )
