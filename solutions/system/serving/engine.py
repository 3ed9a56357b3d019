"""The serving engine: continuous batching of many requests on one model thread.

`Engine.submit` takes prompt token ids and sampling parameters and returns an async token stream.
The loop runs the scheduler kata's step / complete cycle (solutions.scheduler) on the paged KV cache
kata's blocks (solutions.paged_kv): each step's prefill chunks, then one batched decode over every
decoding request, so the weights are read once per step. A client that goes away aborts its request
and frees its blocks. Each request's tokens are chosen through the sampling kata's chain
(solutions.system.decoding.Chooser), which keeps their logprobs. With prefix caching (the default), a
prompt that starts with blocks another request filled shares them and prefills only the rest
(solutions.system.serving.prefix_kv). Not here: batched prefills; stop strings and n > 1 (the server's).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field, fields

import torch
from torch import Tensor

from solutions.paged_kv import PagedKVCache
from solutions.sampling import Sampled, make_chain
from solutions.scheduler import Scheduler, SchedulerConfig
from solutions.system.decoding import Chooser, choose_each
from solutions.system.serving.prefix_kv import CachingPagedKVCache


@dataclass
class SamplingParams:
    """How to choose each token: temperature 0 is greedy; else sampling with top-p (and a seed). The
    penalties and logit_bias apply either way; top_logprobs (n) keeps each token's n alternatives."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    top_logprobs: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        if not 0 <= self.temperature:
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        n = self.top_logprobs
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 20:
            raise ValueError(f"top_logprobs must be an int in [0, 20], got {n!r}")
        self.chain()  # ValueError naming a bad penalty or bias

    def chain(self) -> list:
        """The sampling kata's processors for these parameters (greedy takes no temperature or top-p)."""
        sampling = self.temperature > 0
        return make_chain(
            temperature=self.temperature if sampling else 1.0,
            top_p=self.top_p if sampling and self.top_p < 1 else None,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            logit_bias=self.logit_bias,
        )


@dataclass
class EngineConfig:
    """The KV pool (num_blocks blocks of block_size positions) and the tokens one step may feed."""

    num_blocks: int = 1024  # 16,384 positions of SmolLM2's fp32 keys and values: 0.75 GB
    block_size: int = 16
    max_tokens_per_step: int = 256  # decodes plus prefill chunks in one step
    prefix_caching: bool = True  # share the cached blocks a prompt starts with (prefix_kv)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "prefix_caching":
                if not isinstance(value, bool):
                    raise ValueError(f"EngineConfig.prefix_caching must be True or False, got {value!r}")
            elif type(value) is not int or value < 1:
                raise ValueError(f"EngineConfig.{f.name} must be a positive int, got {value!r}")


@dataclass
class EngineStats:
    pending: int  # requests submitted and not finished (waiting or running)
    blocks_in_use: int  # KV blocks held in the paged cache
    steps: int  # forward steps run so far
    max_batch_seen: int  # the most requests one decode step has served
    preemptions: int  # requests whose blocks were taken back, to be recomputed


@dataclass(eq=False)
class _Request:
    id: int
    prompt: list[int]
    params: SamplingParams
    outlet: _Outlet  # where its stream's items go: token ids, None (done) or an exception
    chooser: Chooser
    generated: list[int] = field(default_factory=list)  # tokens chosen so far
    cached_tokens: int = 0  # prompt tokens found in the prefix cache (its first pass; not after a preemption)
    salt: str | None = None  # the tenant's prefix-cache namespace (prefix_kv)
    preempted: bool = False
    in_cache: bool = False
    cancelled: bool = False
    arrival: float = field(default_factory=time.perf_counter)


class TokenStream:
    """A request's new token ids as an async iterator (its end token, if it samples one, comes last).

    `aclose()` (a client gone, or a stop string found) cancels the request: the engine drops it and
    frees its blocks. Iterating raises RuntimeError if the engine stops first.
    """

    def __init__(self, engine: Engine, request: _Request, queue: asyncio.Queue):
        self._engine, self._request, self._queue = engine, request, queue

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> int:
        item = await self._queue.get()
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        self._engine._cancel(self._request)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens whose keys and values came from the prefix cache (0 until the prefill starts)."""
        return self._request.cached_tokens

    def sampled(self, i: int) -> Sampled:
        """Token i's draw (row 0): its logprob and top_logprobs alternatives, after the chain. Valid for
        every token the stream has yielded (the engine records it before handing the token over)."""
        return self._request.chooser.steps[i]


class Engine:
    """Serves `model` (solutions.model's protocol) to concurrent requests; `eos_token_id` ends one.

    Call `start()` (the loop on a thread of its own) or `run()` (the loop on the calling thread, until
    `close()`) before or while requests are submitted, and `close()` at the end. `run()` on the thread
    that loaded the model is the fast way: libgomp keeps a set of OpenMP threads per thread that starts
    parallel work, and a second set beside the loading thread's made every step slower (the int4-q8
    step at 8 rows took 23 ms from another thread, 14 ms from the loading one: docs/serving.md).
    """

    def __init__(self, model, eos_token_id: int, config: EngineConfig | None = None):
        self.model, self.eos = model, eos_token_id
        self.config = config = config or EngineConfig()
        c = model.config
        self.cache = (CachingPagedKVCache if config.prefix_caching else PagedKVCache)(
            c.n_layers,
            c.n_kv_heads,
            c.head_dim,
            config.num_blocks,
            config.block_size,
            dtype=model.norm.dtype,
            device=model.norm.device,
        )
        self.scheduler = Scheduler(
            SchedulerConfig(config.max_tokens_per_step, config.num_blocks, config.block_size)
        )
        self.context = min(
            c.max_seq_len, config.num_blocks * config.block_size
        )  # positions one request may use
        self._ids = itertools.count()
        self._requests: dict[int, _Request] = {}  # pending, engine thread only
        self._inbox: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._ran = False  # run() was called
        self._steps = self._max_batch_seen = self._preemptions = 0

    def start(self) -> None:
        """Run the loop on a thread of its own."""
        self._thread.start()

    def run(self) -> None:
        """Run the loop on the calling thread until `close()` (from another thread) or an exception, such
        as KeyboardInterrupt, which ends every open stream and is raised. RuntimeError after `start()`."""
        if self._thread.is_alive() or self._ran:
            raise RuntimeError("the engine's loop already runs (start() or run() was called)")
        self._ran = True
        self._loop()

    def close(self) -> None:
        """Stop the loop; streams still open end with RuntimeError."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def stats(self) -> EngineStats:
        with self._wake:
            pending = len(self._requests) + len(self._inbox)
        return EngineStats(
            pending, self.cache.blocks_in_use, self._steps, self._max_batch_seen, self._preemptions
        )

    def submit(self, prompt: list[int], params: SamplingParams, salt: str | None = None) -> TokenStream:
        """Queue a request; call from the event loop that will read the stream. It shares cached prefix
        blocks only with requests of the same `salt` (a tenant's key; None is one namespace too).

        Raises ValueError for an empty prompt, a token outside the vocabulary, a prompt plus
        max_tokens past `context` (the model's context, or the KV pool if smaller), or a salt that is
        not a str or None, and RuntimeError if the engine is closed.
        """
        vocab = self.model.config.vocab_size
        if not prompt or any(not 0 <= t < vocab for t in prompt):
            raise ValueError(f"the prompt must be a non-empty list of token ids in [0, {vocab})")
        if len(prompt) + params.max_tokens > self.context:
            raise ValueError(
                f"{len(prompt)} prompt tokens + max_tokens {params.max_tokens} exceed the "
                f"context of {self.context} tokens"
            )
        if params.logit_bias and max(params.logit_bias) >= vocab:
            raise ValueError(f"logit_bias names token {max(params.logit_bias)}, outside [0, {vocab})")
        if salt is not None and not isinstance(salt, str):
            raise ValueError(f"salt must be a str or None, got {salt!r}")
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()
        greedy, n = params.temperature == 0, params.top_logprobs
        chooser = Chooser(params.chain(), [list(prompt)], greedy=greedy, seed=params.seed, top_logprobs=n)
        request = _Request(next(self._ids), list(prompt), params, _Outlet(loop, queue), chooser, salt=salt)
        with self._wake:
            if self._closing:
                raise RuntimeError("the engine is closed")
            self._inbox.append(request)
            self._wake.notify()
        return TokenStream(self, request, queue)

    def _cancel(self, request: _Request) -> None:
        with self._wake:
            request.cancelled = True  # a no-op once it has finished; else dropped before the next step
            self._wake.notify()

    # ------------------------------------------------------------------ the model thread

    def _loop(self) -> None:
        try:
            with torch.inference_mode():
                while self._take_requests():
                    if self._requests:
                        self._step()
        except BaseException as exc:  # the model failed: every open stream hears it, none hangs
            self._end_all(RuntimeError(f"the engine stopped: {type(exc).__name__}: {exc}"))
            raise
        self._end_all(RuntimeError("the engine was closed"))

    def _take_requests(self) -> bool:
        """Wait for work; hand new requests to the scheduler, drop cancelled ones. False once closing."""
        with self._wake:
            while not self._closing and not (self._inbox or self._requests):
                self._wake.wait()
            if self._closing:
                return False
            new, self._inbox = list(self._inbox), deque()
            for request in new:
                self._requests[request.id] = request
            gone = [r for r in self._requests.values() if r.cancelled]
        for request in new:
            self.scheduler.add(
                str(request.id), request.prompt, request.params.max_tokens, request.arrival, self.eos
            )
        for request in gone:
            self.scheduler.abort(str(request.id))
            self._retire(request)
        return True

    def _step(self) -> None:
        """Run one plan of the scheduler: prefill chunks, one batched decode, then report the tokens."""
        plan = self.scheduler.step()
        for rid in plan.preempted:
            self._requests[int(rid)].preempted = True
            self._free_blocks(self._requests[int(rid)])
            self._preemptions += 1
        sampling: list[tuple[_Request, Tensor]] = []  # (request, its logits (V,))
        for chunk in plan.prefills:
            request = self._requests[int(chunk.request_id)]
            tokens = request.prompt + request.generated  # what the scheduler prefills, in order
            if not request.in_cache:
                self.cache.add_sequence(request.id)
                request.in_cache = True
            self._reuse(request, tokens, chunk)
            # Positions the prefix cache already holds are skipped: the scheduler counted them as a
            # prefill, and their keys and values are there (a hit leaves the last prompt token to compute).
            ids = chunk.ids[max(0, self.cache.num_tokens(request.id) - chunk.start) :]
            if ids:
                view = self.cache.view([request.id])
                logits = self.model.prefill(torch.tensor([ids]), view, last_only=True)  # (1, 1, V)
                if chunk.sample:
                    sampling.append((request, logits[0, -1]))
                self._publish(request, tokens)
        if plan.decodes:
            batch = [self._requests[int(c.request_id)] for c in plan.decodes]
            view = self.cache.view([r.id for r in batch])
            mask = view.attention_mask() if len(batch) > 1 else None  # (B, length + 1): rows differ in length
            logits = self.model.decode_step(
                torch.tensor([c.ids[0] for c in plan.decodes]), view, mask
            )  # (B, V)
            sampling += zip(batch, logits)
            self._max_batch_seen = max(self._max_batch_seen, len(batch))
            for request in batch:
                self._publish(request, request.prompt + request.generated)
        self._steps += 1
        picks = choose_each([r.chooser for r, _ in sampling], [row for _, row in sampling])  # rows (V,)
        chosen = {str(r.id): token for (r, _), token in zip(sampling, picks)}
        finished = self.scheduler.complete(chosen, time.perf_counter())
        out: list[tuple[_Outlet, object]] = []  # handed over together: one wake-up of each event loop
        for (request, _), token in zip(sampling, picks):
            request.generated.append(token)
            out.append((request.outlet, token))
        for done in finished:
            request = self._requests[int(done.request_id)]
            self._retire(request)  # before the stream ends: a client that reads its end finds the blocks free
            out.append((request.outlet, None))
        _deliver(out)

    def _reuse(self, request: _Request, tokens: list[int], chunk) -> None:
        """Before a prefill chunk: take the cached blocks that continue the request's sequence, within the
        blocks the scheduler counted up to the chunk's end (so the pool holds them). They may reach past
        the chunk: the next chunk then skips what they hold."""
        held = self.cache.num_tokens(request.id)
        if isinstance(self.cache, CachingPagedKVCache) and held >= chunk.start:
            now = self.cache.extend(request.id, tokens, upto=chunk.start + len(chunk.ids), salt=request.salt)
            if not request.preempted:  # what the client's usage reports: its first pass only
                request.cached_tokens += now - held

    def _publish(self, request: _Request, tokens: list[int]) -> None:
        if isinstance(self.cache, CachingPagedKVCache):
            self.cache.publish(request.id, tokens, salt=request.salt)

    def _free_blocks(self, request: _Request) -> None:
        if request.in_cache:
            self.cache.free(request.id)
            request.in_cache = False

    def _retire(self, request: _Request) -> None:
        self._free_blocks(request)
        with self._wake:
            self._requests.pop(request.id, None)

    def _end_all(self, error: Exception) -> None:
        with self._wake:
            _deliver([(r.outlet, error) for r in list(self._requests.values()) + list(self._inbox)])


@dataclass(frozen=True, eq=False)
class _Outlet:
    """A stream's queue and the event loop that reads it (the one that submitted the request)."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue


def _deliver(items: list[tuple[_Outlet, object]]) -> None:
    """Hand each item to its stream from the model thread, in order, with one call_soon_threadsafe per
    event loop, not one per token: each call wakes the loop's thread (a write to its self-pipe). A
    closed loop has no one to hear it."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, object]]] = {}
    for outlet, item in items:
        by_loop.setdefault(outlet.loop, []).append((outlet.queue, item))
    for loop, puts in by_loop.items():
        try:
            loop.call_soon_threadsafe(_put_all, puts)
        except RuntimeError:
            pass


def _put_all(puts: list[tuple[asyncio.Queue, object]]) -> None:
    for queue, item in puts:
        queue.put_nowait(item)
