"""The serving engine: many requests, one model thread, one batched decode step for all of them.

A request goes in as prompt token ids and sampling parameters; its tokens come back as an async
stream (`Engine.generate`), so an asyncio server can await them while the model runs in its own
thread. Each iteration of the engine loop admits one waiting request (prefills its whole prompt
into a cache of its own and samples its first token), then runs one decode step over every
running request at once: the weights are read once per step, not once per request, which is why
concurrent requests cost little more than one. Rows of the decode batch hold different lengths:
`RaggedBatch` gathers each request's cache into a right-padded batch with a mask that hides the
padding. A request leaves when it samples an end token, reaches max_tokens or is cancelled (its
stream closed: the client went away), and its cache is dropped at once.

Left out: chunked prefill, preemption and a KV block budget (the scheduler and paged-KV katas),
prefix sharing, stop strings, logprobs, more than one choice per request.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from solutions.generate import _filtered_probs

FIRST_CACHE_TOKENS = 256  # positions a request's cache holds beyond its prompt at first; it doubles when full


@dataclass
class SamplingParams:
    """How to choose each token: temperature 0 is greedy; else sampling with top-p (and a seed)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        if not 0 <= self.temperature:
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")


@dataclass
class Sequence:
    """One request inside the engine: its prompt, the tokens so far and its own cache."""

    id: int
    prompt: list[int]
    params: SamplingParams
    emit: Callable[[object], None]  # hands a token id, None (done) or an exception to the stream
    generator: torch.Generator | None = None  # sampling only
    cache: object = None
    tokens: list[int] = field(default_factory=list)
    cancelled: bool = False

    @property
    def length(self) -> int:
        """Positions in its cache: the prompt and every token fed back so far."""
        return self.cache.length


@dataclass
class EngineStats:
    waiting: int
    running: int
    cached_tokens: int  # positions held by running requests' caches
    steps: int  # decode steps run so far
    max_batch_seen: int  # the largest decode batch so far


class Engine:
    """Serves `model` (the model protocol of solutions.model) to concurrent requests.

    `eos_token_ids` end a request (the token is streamed, then the stream ends). `max_batch`
    bounds the decode batch; further requests wait their turn (first come, first served).
    Call `start()` before `generate`, and `close()` at the end.
    """

    def __init__(self, model, eos_token_ids: list[int], *, max_batch: int = 16):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model, self.eos, self.max_batch = model, set(eos_token_ids), max_batch
        self.context = model.config.max_seq_len
        self._ids = itertools.count()
        self._inbox: deque[Sequence] = deque()
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._steps = self._max_batch_seen = 0

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop the loop; requests still open end with a RuntimeError in their streams."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join()

    def stats(self) -> EngineStats:
        with self._wake:
            running = list(self._running)
            waiting = len(self._waiting) + len(self._inbox)
        return EngineStats(waiting, len(running), sum(s.length for s in running if s.cache is not None),
                           self._steps, self._max_batch_seen)

    async def generate(self, prompt: list[int], params: SamplingParams) -> AsyncIterator[int]:
        """The new token ids for `prompt`, as the model chooses them (an end token comes last).

        Closing the iterator early (a client that disconnects) cancels the request and frees its
        cache. Raises ValueError for an empty prompt, a token outside the vocabulary or a prompt
        plus max_tokens past the model's context, and RuntimeError if the engine is closed.
        """
        vocab = self.model.config.vocab_size
        if not prompt or any(not 0 <= t < vocab for t in prompt):
            raise ValueError(f"the prompt must be a non-empty list of token ids in [0, {vocab})")
        if len(prompt) + params.max_tokens > self.context:
            raise ValueError(f"{len(prompt)} prompt tokens + max_tokens {params.max_tokens} exceed the "
                             f"model's context of {self.context} tokens")
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()
        seq = Sequence(next(self._ids), list(prompt), params, lambda item: _put(loop, queue, item))
        if params.temperature > 0:
            seq.generator = torch.Generator()
            if params.seed is None:
                seq.generator.seed()
            else:
                seq.generator.manual_seed(params.seed)
        with self._wake:
            if self._closing:
                raise RuntimeError("the engine is closed")
            self._inbox.append(seq)
            self._wake.notify()
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            seq.cancelled = True  # a no-op once it has finished; otherwise the loop drops it next step
            with self._wake:
                self._wake.notify()

    # ------------------------------------------------------------------ the model thread

    def _loop(self) -> None:
        try:
            with torch.inference_mode():
                while self._next_batch():
                    self._admit()
                    if self._running:
                        self._decode()
        except BaseException as exc:  # the model failed: every open stream hears it, none hangs
            for seq in list(self._running) + list(self._waiting) + list(self._inbox):
                seq.emit(RuntimeError(f"the engine stopped: {type(exc).__name__}: {exc}"))
            raise
        for seq in list(self._running) + list(self._waiting) + list(self._inbox):
            seq.emit(RuntimeError("the engine was closed"))

    def _next_batch(self) -> bool:
        """Wait for work; take new requests in and drop cancelled ones. False once closing."""
        with self._wake:
            while not self._closing and not (self._inbox or self._waiting or self._running):
                self._wake.wait()
            if self._closing:
                return False
            self._waiting.extend(self._inbox)
            self._inbox.clear()
            self._waiting = deque(s for s in self._waiting if not s.cancelled)
            for seq in self._running:
                if seq.cancelled:
                    seq.cache = None  # a client that went away: its memory goes back now
            self._running = [s for s in self._running if not s.cancelled]
        return True

    def _admit(self) -> None:
        """Prefill the first waiting request if the batch has room, and sample its first token."""
        if not self._waiting or len(self._running) >= self.max_batch:
            return
        seq = self._waiting[0]
        seq.cache = self.model.new_cache(1, min(self.context, len(seq.prompt) + FIRST_CACHE_TOKENS))
        logits = self.model.prefill(torch.tensor([seq.prompt]), seq.cache)[:, -1]  # (1, V)
        with self._wake:
            self._waiting.popleft()
            self._running.append(seq)
        self._finish_step([seq], self._choose([seq], logits))

    def _decode(self) -> None:
        """One decode step for every running request that has a token to feed back."""
        batch = [s for s in self._running if s.tokens]
        for seq in batch:
            if seq.length == seq.cache.max_len:
                seq.cache = _grown(self.model, seq.cache, min(self.context, 2 * seq.cache.max_len))
        ids = torch.tensor([s.tokens[-1] for s in batch])  # (B,)
        if len(batch) == 1:
            logits = self.model.decode_step(ids, batch[0].cache)  # (1, V)
        else:
            view = RaggedBatch([s.cache for s in batch])
            logits = self.model.decode_step(ids, view, view.attention_mask())  # (B, V)
        self._steps += 1
        self._max_batch_seen = max(self._max_batch_seen, len(batch))
        self._finish_step(batch, self._choose(batch, logits))

    def _choose(self, batch: list[Sequence], logits: Tensor) -> list[int]:
        """Each row's next token under its own parameters: argmax, or a draw from its generator."""
        chosen = logits.argmax(dim=-1).tolist()  # (B,)
        for row, seq in enumerate(batch):
            p = seq.params
            if p.temperature > 0:
                probs = _filtered_probs(logits[row:row + 1], p.temperature, None, p.top_p)  # (1, V)
                chosen[row] = int(torch.multinomial(probs, 1, generator=seq.generator))
        return chosen

    def _finish_step(self, batch: list[Sequence], chosen: list[int]) -> None:
        """Stream each chosen token; retire the requests that ended."""
        done = []
        for seq, token in zip(batch, chosen):
            seq.tokens.append(token)
            seq.emit(token)
            if token in self.eos or len(seq.tokens) == seq.params.max_tokens:
                seq.emit(None)
                done.append(seq)
        if done:
            with self._wake:
                self._running = [s for s in self._running if s not in done]
            for seq in done:
                seq.cache = None  # its memory goes back now, not when the stream is collected


class RaggedBatch:
    """A decode batch over per-request caches of different lengths, in the model's cache protocol.

    `length` is the longest row's; `update` appends each row's new key and value to its own cache
    and returns them right-padded with zeros to (B, H_kv, length + 1, D). `attention_mask()` marks
    each row's real positions (its cache and the new token), so padding is never attended to and
    each row's new token gets position = its own cached length (the model counts the mask).
    """

    def __init__(self, caches: list):
        self.caches = caches
        self.lengths = [c.length for c in caches]
        self.length = max(self.lengths)

    def attention_mask(self) -> Tensor:
        cols = torch.arange(self.length + 1)  # (T,)
        return cols[None, :] <= torch.tensor(self.lengths)[:, None]  # (B, length + 1)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        B, H, _, D = k.shape  # (B, H_kv, 1, D)
        keys = k.new_zeros(B, H, self.length + 1, D)  # zeros: a padded value times weight 0 stays 0
        values = v.new_zeros(B, H, self.length + 1, D)
        for row, cache in enumerate(self.caches):
            ck, cv = cache.update(layer, k[row:row + 1], v[row:row + 1])  # (1, H_kv, L_row + 1, D)
            keys[row, :, :ck.shape[2]] = ck[0]
            values[row, :, :cv.shape[2]] = cv[0]
        return keys, values


def _grown(model, cache, max_len: int):
    """A cache of `max_len` positions holding `cache`'s (the old one's storage is then dropped)."""
    new = model.new_cache(1, max_len)
    for layer in range(cache.n_layers):
        new.update(layer, cache.k[layer][:, :, :cache.length], cache.v[layer][:, :, :cache.length])
    return new


def _put(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, item) -> None:
    """Hand `item` to a stream from the model thread; a closed event loop has no one to hear it."""
    try:
        loop.call_soon_threadsafe(queue.put_nowait, item)
    except RuntimeError:
        pass
