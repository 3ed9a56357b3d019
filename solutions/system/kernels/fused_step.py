"""A whole decode step in native code: int4-q8 at batch 1 or on the paged cache's batches; fp32 at 1-8 rows.

`FusedStep` (solutions/system/kernels/csrc/decode_step.h) and `FusedStepF32` (decode_step_f32.h) do
what `Llama.decode_step` does, embedding row to LM head, in one native call, and compute what
solutions/model.py computes. A step that is not plain (padding, another cache, no room) is declined
(None) and the readable path runs; a PagedView (dojo serve's batches and prefill chunks) goes to
solutions.system.kernels.paged_step. `calibrate_prefetch` and `calibrate_kv_prefetch` measure the
int4-q8 step's prefetch distances (weights; paged keys and values) once per machine and model shape
(solutions.system.kernels.streams, its weight streams). Not here: the fp32 step on the paged cache,
the bf16 and int4 modes, prompts of more than 8 tokens on a KVCache (2 in the int4-q8 modes).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import weakref
from pathlib import Path

import torch
from torch import Tensor

from solutions.kv_cache import KVCache
from solutions.paged_kv import PagedView
from solutions.system.kernels import native, paged_step, streams

STREAMS_F32_BUDGET_S = 4.0  # an fp32 step reads 4 bytes a weight, about 10x the int4-q8 step: 8 row
# counts x 3 choices x 4 rounds (the first untimed) fit this on a quiet machine, once per machine
RESCORE = (
    16  # the LM head's top logits recomputed exactly, as solutions.system.kernels.weight_modes.RescoredHead
)
ENV = native.FUSED_ENV  # "0": never fuse (the readable path only), for comparing the two
PREFETCH_ENV = "DOJO_PREFETCH"  # a prefetch distance in tile-blocks, instead of measuring one
# Distances tried, in 320-byte tile-blocks (0 to 20 KB ahead): a doubling range to measure, not a tuning.
PREFETCH_CANDIDATES = (0, 4, 8, 16, 32, 64)
BATCH_ROWS = 8  # the batch a distance is timed at beside one row (the kernel's most rows a pass)
KV_PREFETCH_ENV = "DOJO_KV_PREFETCH"  # the paged attention's distance in positions, instead of measuring
# Distances tried, in positions of a row's keys and values (a doubling range, not a tuning), timed on
# BATCH_ROWS rows of KV_POSITIONS positions each, their 16-slot blocks taken in turn as concurrent
# sequences get them from the pool (the hardware prefetcher does not follow a row across blocks).
KV_PREFETCH_CANDIDATES = (0, 2, 4, 8, 16, 32)
KV_POSITIONS, KV_BLOCK = 128, 16
ROUNDS = 3  # interleaved rounds over the candidates, the median kept ...
BUDGET_S = 1.0  # ... while the calibration has taken less than this: on a busy machine a step can take
# a hundred times its quiet time, and the first start must not wait minutes (one round always runs)
_calibrated: dict[
    str, dict[int, float]
] = {}  # this process's, by calibration key: distance -> median seconds


def prefetch_file() -> Path:
    """Where measured distances are kept: beside the compiled kernel, which is per machine."""
    return native.BUILD_DIR / "prefetch.json"


def calibration_key(kernel, config) -> str:
    """What a measured distance depends on: the kernel build, CPU, instruction set, threads, model shape."""
    from solutions.system.kernels.calibration import cpu_model

    return json.dumps(
        {
            "build": native.module_name(),
            "cpu": cpu_model(),
            "isa": kernel.isa,
            "threads": torch.get_num_threads(),
            "model": repr(config),
            "timed": f"1 and {BATCH_ROWS} rows",  # what a prefetch distance was timed on
        },
        sort_keys=True,
    )


def calibrate_prefetch(decoder, kernel, config) -> dict[int, float]:
    """The weights' prefetch distance for this decoder: DOJO_PREFETCH's where it is set; else the one
    measured for this machine and model shape before (prefetch_file(); delete it to measure again);
    else measured now: a 1-row and an 8-row fused step timed together at each PREFETCH_CANDIDATES
    distance on one-position scratch caches (the best distance differs by row count: the batch's
    tile loop takes longer a block, docs/serving.md), ROUNDS interleaved rounds within BUDGET_S,
    the fastest median kept, and saved when all the rounds fit the budget (a machine too busy for
    that is measured again next time). Sets the distance (process-wide) and returns {distance:
    median seconds}. Raises ValueError for a DOJO_PREFETCH that is not a distance."""
    return _calibrate("weights", decoder, kernel, config)


def calibrate_kv_prefetch(decoder, kernel, config) -> dict[int, float]:
    """The paged attention's prefetch distance, in positions, as calibrate_prefetch finds the weights'
    (with the weights' distance already set): DOJO_KV_PREFETCH's, else saved, else measured now by
    timing an 8-row paged step at each KV_PREFETCH_CANDIDATES distance, each row attending to
    KV_POSITIONS positions of a scratch pool."""
    return _calibrate("kv", decoder, kernel, config)


# What each distance is: its variable, the distances tried, its unit, the kernel's setter.
_PARTS = {
    "weights": (PREFETCH_ENV, PREFETCH_CANDIDATES, "tile-blocks", "set_prefetch"),
    "kv": (KV_PREFETCH_ENV, KV_PREFETCH_CANDIDATES, "positions", "set_kv_prefetch"),
}


def _calibrate(part: str, decoder, kernel, config) -> dict[int, float]:
    env, _, unit, setter = _PARTS[part]
    set_distance = getattr(kernel.module, setter)
    if (fixed := os.environ.get(env)) is not None:
        try:
            set_distance(int(fixed))
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"{env}={fixed!r} is not a prefetch distance in 0..4096 {unit}") from exc
        return {int(fixed): float("nan")}
    key = calibration_key(kernel, config) + ("" if part == "weights" else f" {part}")
    medians = _calibrated.get(key) or _read_saved(key)
    if medians is None:
        medians, complete = _measure(part, decoder, kernel, config)
        if (
            complete
        ):  # all ROUNDS within the budget; else the machine was too busy to trust: measure next time
            _save(key, medians)
    _calibrated[key] = medians
    set_distance(min(medians, key=medians.get))
    return medians


def _measure(part: str, decoder, kernel, config) -> tuple[dict[int, float], bool]:
    """{distance: median seconds} of `part`'s candidates, and whether all ROUNDS ran within BUDGET_S."""
    _, candidates, _, setter = _PARTS[part]
    step = _weights_step(decoder, config) if part == "weights" else _kv_step(decoder, config)
    start = time.perf_counter()
    step()  # the first touch of every weight (page faults on a mapped cache) is not timed
    times: dict[int, list[float]] = {d: [] for d in candidates}
    for round_ in range(ROUNDS):
        if round_ and time.perf_counter() - start > BUDGET_S:
            break
        for distance in candidates:
            getattr(kernel.module, setter)(distance)
            began = time.perf_counter()
            step()
            times[distance].append(time.perf_counter() - began)
    return {d: statistics.median(t) for d, t in times.items()}, len(times[0]) == ROUNDS


def _weights_step(decoder, config):
    """A 1-row step and a BATCH_ROWS-row step, each row at position 0 of a scratch cache."""
    kv = torch.zeros(2, config.n_layers, 1, config.n_kv_heads, 1, config.head_dim)
    batch = streams.q4_step(decoder, config)  # rows one sequence each, on a scratch pool

    def step() -> None:
        decoder.step(0, kv, 0)
        batch(BATCH_ROWS)

    return step


def _kv_step(decoder, config):
    """A BATCH_ROWS-row paged step, each row attending to KV_POSITIONS positions (fewer where the context
    is shorter) of a scratch pool whose KV_BLOCK-slot blocks go to the rows in turn."""
    rows, positions = BATCH_ROWS, min(KV_POSITIONS, config.max_seq_len)
    blocks = -(-positions // KV_BLOCK)
    pool = torch.full((config.n_layers, 2, rows * blocks * KV_BLOCK, config.n_kv_heads, config.head_dim), 0.5)
    t = torch.arange(positions)
    slots = torch.stack([((t // KV_BLOCK) * rows + r) * KV_BLOCK + t % KV_BLOCK for r in range(rows)])
    ids, lens = torch.zeros(rows, dtype=torch.long), torch.full((rows,), positions - 1)
    return lambda: decoder.step_paged(ids, pool, slots, lens)  # slots (rows, positions)


def _read_saved(key: str) -> dict[int, float] | None:
    try:
        entry = json.loads(prefetch_file().read_text())[key]
        medians = {int(d): float(t) for d, t in entry.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # none saved, or unreadable: measure again (and rewrite the file)
    return medians if medians and all(0 <= d <= 4096 for d in medians) else None


def _save(key: str, medians: dict[int, float]) -> None:
    from solutions.system.kernels.calibration import write_entry

    try:
        write_entry(prefetch_file(), key, {str(d): t for d, t in medians.items()})
    except OSError:
        pass  # a read-only build folder: this process keeps its measurement, the next measures again


def _plain_step_cache(
    ids: Tensor,
    cache,
    attention_mask: Tensor | None,
    max_seq_len: int,
    max_rows: int,
    vocab_size: int,
    max_tokens: int = 1,
) -> bool:
    """Whether a fused step can take these tokens: ids (rows,), one a row, or (rows, T), T a row, with
    1..max_rows rows and 1..max_tokens tokens a row, all in the vocabulary; the reference KVCache in
    fp32 on the CPU with one row per row of ids, every layer at the same length, room for the new
    positions in the cache and the context, and no padding in the mask."""
    if ids.dim() not in (1, 2) or ids.dtype != torch.long or type(cache) is not KVCache:
        return False
    rows, new = ids.shape[0], (ids.shape[1] if ids.dim() == 2 else 1)
    if not (1 <= rows <= max_rows and 1 <= new <= max_tokens):
        return False
    if cache.batch_size != rows or cache.dtype != torch.float32 or cache.device.type != "cpu":
        return False
    pos = cache.length
    if pos + new > cache.max_len or pos + new > max_seq_len:
        return False
    try:
        cache.advance(0)  # raises where a pass was left half written
    except ValueError:
        return False
    if attention_mask is not None and (
        attention_mask.shape != (rows, pos + new) or not bool(attention_mask.all())
    ):
        return False
    return bool(((ids >= 0) & (ids < vocab_size)).all())


def _not_copied(self, memo) -> None:
    """copy.deepcopy of a model holding a fused step: the copy's weights are new tensors, which this step
    (native, pointing into the original's) does not read, so the copy gets no fused step and runs the
    readable path; its own `for_model` gives it one."""
    return None


class FusedStep:
    """A callable `(ids, cache, attention_mask) -> logits (1, V), or (B, V) on a PagedView, or None` over
    a native Decoder."""

    __deepcopy__ = _not_copied

    def __init__(
        self,
        decoder,
        kernel,
        vocab_size: int,
        max_seq_len: int,
        prefetch: dict[int, float],
        measured_streams: dict[int, dict[int, float]] | None = None,
        kv_prefetch: dict[int, float] | None = None,
    ):
        self.decoder, self.kernel = decoder, kernel
        self.vocab_size, self.max_seq_len = vocab_size, max_seq_len
        self.prefetch = prefetch  # the calibration: distance -> median step seconds
        self.distance = kernel.module.prefetch()  # the one it chose, set again before each step
        self.kv_prefetch = kv_prefetch or {}  # the paged attention's: positions -> median step seconds
        self.kv_distance = kernel.module.kv_prefetch()  # likewise
        self.measured_streams = measured_streams or {}  # rows -> streams -> median step seconds
        self.streams = streams.fastest(self.measured_streams)  # rows -> the streams chosen, set likewise

    @classmethod
    def for_model(cls, model, isa: str | None = None) -> FusedStep | None:
        """The fused step for an int4-q8 / int4-q8x2 model (solutions.system.loading.weights.build_model), or None
        where there is no compiled kernel, DOJO_FUSED=0, or the model is not in the form the step
        reads (tiled Q4_1 matrices, a Q8_0 embedding, a rescored head). `isa`: an instruction set
        other than the kernel's own choice (the bench times the AVX2 floor this way); RuntimeError
        if this CPU cannot run it."""
        from dataclasses import replace

        from solutions.system.kernels.weight_modes import Q4Q8Linear, Q8Rows, RescoredHead

        if not native.fused_enabled():
            return None
        kernel = native.kernel()
        if isa is not None:
            kernel = replace(kernel, isa=isa)
        head = model.lm_head
        mats = [
            getattr(layer, name) for layer in model.layers for name in ("wqkv", "wo", "w_gate_up", "w_down")
        ]
        if not (
            isinstance(head, RescoredHead)
            and isinstance(head.fast, Q4Q8Linear)
            and head.k == RESCORE
            and isinstance(model.embed, Q8Rows)
            and all(isinstance(m, Q4Q8Linear) for m in mats)
            and len({m.residual for m in [*mats, head.fast]}) == 1
        ):
            return None
        c = model.config
        norms = [n.detach().contiguous() for layer in model.layers for n in (layer.attn_norm, layer.ffn_norm)]
        decoder = kernel.module.Decoder(
            [
                c.d_model,
                c.n_layers,
                c.n_heads,
                c.n_kv_heads,
                c.head_dim,
                c.d_ff,
                c.vocab_size,
                c.max_seq_len,
                RESCORE,
            ],
            c.norm_eps,
            head.fast.residual,
            [*norms, model.norm.detach().contiguous()],
            [m.tiles for m in mats] + [head.fast.tiles],
            model.embed.blocks.contiguous(),
            model.rope_cos.contiguous(),
            model.rope_signed_sin.contiguous(),
            kernel.isa,
        )
        prefetch = calibrate_prefetch(decoder, kernel, c)
        measured = streams.calibrate_streams(kernel, calibration_key(kernel, c), streams.q4_step(decoder, c))
        kv_prefetch = calibrate_kv_prefetch(decoder, kernel, c)  # with the weights' distance and streams set
        return cls(decoder, kernel, c.vocab_size, c.max_seq_len, prefetch, measured, kv_prefetch)

    def _settings(self) -> None:
        """Set this step's prefetch distances and streams: the settings are process-wide, and another
        model, or another instruction set, may want others."""
        self.kernel.module.set_prefetch(self.distance)
        self.kernel.module.set_kv_prefetch(self.kv_distance)
        streams.apply(self.kernel, self.streams)

    def describe(self) -> str:
        """The step, its prefetch distances and weight streams, with what the calibrations measured."""

        def measured(medians: dict[int, float], env: str) -> str:
            if len(medians) == 1:
                return f" ({env})"
            return (
                " (measured ms a step: " + ", ".join(f"{d}: {t * 1e3:.1f}" for d, t in medians.items()) + ")"
            )

        where = f"fused native step on {self.kernel.isa}, prefetching {self.distance} tile-blocks ahead"
        where += measured(self.prefetch, PREFETCH_ENV)
        where += f"; paged attention prefetching {self.kv_distance} positions ahead"
        where += measured(self.kv_prefetch, KV_PREFETCH_ENV)
        return where + streams.describe(self.streams)

    def __call__(self, ids: Tensor, cache, attention_mask: Tensor | None) -> Tensor | None:
        if isinstance(
            cache, PagedView
        ):  # dojo serve's batches: every row in one call, through the block tables
            if not paged_step.plain(cache, ids, attention_mask, self.max_seq_len, self.vocab_size):
                return None
            self._settings()
            return paged_step.paged_step(self.decoder, ids, cache)  # (B, V)
        if ids.dim() != 1 or not _plain_step_cache(
            ids, cache, attention_mask, self.max_seq_len, 1, self.vocab_size
        ):
            return None
        self._settings()
        logits = self.decoder.step(
            int(ids[0]), cache.storage, cache.length
        )  # (V,); writes K, V at pos of every layer
        cache.advance(1)
        return logits[None]

    PREFILL_STEPS = 2  # tokens a prefill takes as that many steps (a draft model's catch-up in speculative
    # decoding: the last accepted draft and the target's token); a readable pass costs more than two steps

    def prefill(
        self, ids: Tensor, cache, attention_mask: Tensor | None, last_only: bool = False
    ) -> Tensor | None:
        """Logits (1, T, V), or with last_only (1, 1, V), for tokens ids (1, T) of one row: on a PagedView
        in native chunks (paged_step.paged_prefill); on the reference KVCache, 1 or 2 tokens as T fused
        steps. None where it declines: a longer prompt on a KVCache, and anything not plain, take the
        readable path, whose products are this kernel."""
        if isinstance(cache, PagedView):
            if not paged_step.plain(cache, ids, attention_mask, self.max_seq_len, self.vocab_size):
                return None
            self._settings()
            return paged_step.paged_prefill(self.decoder, ids, cache, last_only)
        if ids.dim() != 2 or not _plain_step_cache(
            ids, cache, attention_mask, self.max_seq_len, 1, self.vocab_size, self.PREFILL_STEPS
        ):
            return None
        T = ids.shape[1]
        rows = []
        for i in range(T):
            mask = None if attention_mask is None else attention_mask[:, : cache.length + 1]
            if (row := self(ids[:, i], cache, mask)) is None:
                if i:  # (cannot happen: the checks above cover what a later step would decline)
                    raise RuntimeError("a fused prefill declined half way")
                return None
            rows.append(row)
        logits = torch.stack(rows, dim=1)  # (1, T, V)
        return logits[:, -1:] if last_only else logits


def _reads(model) -> tuple:
    """Where each tensor the fp32 step reads lives (data pointer, strides), with the model's head and
    attention function: what must not change under a built step."""
    tensors = [model.embed, model.norm, model.rope_cos, model.rope_signed_sin]
    tensors += [
        getattr(layer, name)
        for layer in model.layers
        for name in ("attn_norm", "ffn_norm", "wqkv", "wo", "w_gate_up", "w_down")
    ]
    return (model.lm_head, model.attention_fn, *((t.data_ptr(), t.stride(), t.dtype) for t in tensors))


class FusedStepF32:
    """The fp32 model's decode step in native code (solutions/system/kernels/csrc/decode_step_f32.h), for 1..MAX_ROWS
    rows at one position: a greedy step, or the beams of a beam search. A callable `(ids, cache,
    attention_mask) -> logits (B, V) or None`, declining what is not plain, as FusedStep does; and
    `prefill` for up to MAX_ROWS tokens of one row."""

    MAX_ROWS = 8
    __deepcopy__ = _not_copied

    def __init__(self, decoder, kernel, model, measured_streams: dict[int, dict[int, float]] | None = None):
        self.decoder, self.kernel = decoder, kernel
        self.measured_streams = measured_streams or {}  # rows -> streams -> median step seconds
        self.streams = streams.fastest(self.measured_streams)  # rows -> the streams chosen
        self.vocab_size, self.max_seq_len = model.config.vocab_size, model.config.max_seq_len
        self.model = weakref.ref(model)  # (the model holds this step: no cycle)
        self.read = _reads(model)  # what the native step points into, as it was when built

    def current(self) -> bool:
        """Whether the model still holds the weights the step was built on: a weight replaced since (a
        Parameter assigned anew, `.data` swapped by `.to()` or `.half()`, load_state_dict(assign=True),
        another attention function or head) would leave the native step reading the old ones, so the
        step then declines and the readable path runs. Writes into a weight in place are read as made."""
        model = self.model()
        return model is not None and _reads(model) == self.read

    @classmethod
    def for_model(cls, model, isa: str | None = None) -> FusedStepF32 | None:
        """The fused step for an fp32 `Llama` (tied embedding, fp32 matrices row- or column-major as
        solutions.system.kernels.calibration lays them out, the reference attention), or None where there is no
        compiled kernel, DOJO_FUSED=0, or the model is not in that form. `isa` as in FusedStep."""
        from dataclasses import replace

        from solutions.system.kernels.attention_fast import attention as fast_attention

        if not native.fused_enabled():
            return None
        kernel = native.kernel()
        if isa is not None:
            kernel = replace(kernel, isa=isa)
        mats = [
            getattr(layer, name) for layer in model.layers for name in ("wqkv", "wo", "w_gate_up", "w_down")
        ]
        tensors = [model.embed, *mats]
        if not (
            model.lm_head is None
            and model.attention_fn is fast_attention
            and all(
                isinstance(t, Tensor) and t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors
            )
        ):
            return None
        c = model.config
        norms = [n.detach().contiguous() for layer in model.layers for n in (layer.attn_norm, layer.ffn_norm)]
        decoder = kernel.module.DecoderF32(
            [c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff, c.vocab_size, c.max_seq_len],
            c.norm_eps,
            [*norms, model.norm.detach().contiguous()],
            [m.detach() for m in mats],
            model.embed.detach(),
            model.rope_cos.contiguous(),
            model.rope_signed_sin.contiguous(),
            kernel.isa,
        )
        key = calibration_key(kernel, c) + " fp32"
        measured = streams.calibrate_streams(
            kernel, key, streams.f32_step(decoder, c), f32=True, budget=STREAMS_F32_BUDGET_S
        )
        return cls(decoder, kernel, model, measured)

    def _settings(self) -> None:
        """Set this step's weight streams (process-wide, as FusedStep's)."""
        streams.apply(self.kernel, self.streams, f32=True)

    def describe(self) -> str:
        where = f"fused native fp32 step on {self.kernel.isa}, 1-{self.MAX_ROWS} rows"
        return where + streams.describe(self.streams)

    def __call__(self, ids: Tensor, cache, attention_mask: Tensor | None) -> Tensor | None:
        if ids.dim() != 1 or not _plain_step_cache(
            ids, cache, attention_mask, self.max_seq_len, self.MAX_ROWS, self.vocab_size
        ):
            return None
        if not self.current():
            return None
        self._settings()
        logits = self.decoder.step(
            ids.contiguous(), cache.storage, cache.length
        )  # (B, V); K, V written at pos
        cache.advance(1)
        return logits

    def prefill(
        self, ids: Tensor, cache, attention_mask: Tensor | None, last_only: bool = False
    ) -> Tensor | None:
        """Logits (1, T, V) (with last_only (1, 1, V)) for a few tokens ids (1, T), 1 <= T <= MAX_ROWS, of one sequence after the
        cache's positions, in one native call (speculative decoding's verification: each weight read once
        for all T), or None where it is not plain (the readable path then runs). Each position's logits
        are bit for bit those of feeding its token alone through `__call__`."""
        if ids.dim() != 2 or not _plain_step_cache(
            ids, cache, attention_mask, self.max_seq_len, 1, self.vocab_size, self.MAX_ROWS
        ):
            return None
        if not self.current():
            return None
        self._settings()
        pos, T = cache.length, ids.shape[1]
        logits = self.decoder.chunk(ids[0].contiguous(), cache.storage, pos)  # (T, V); K, V written at pos..
        cache.advance(T)
        return logits[None, -1:] if last_only else logits[None]
