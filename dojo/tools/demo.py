"""`dojo demo "question"`: SmolLM2 answers a chat question on the reference inference system.

Greedy answers come by default from speculative decoding (solutions.speculative: fp32 verifies the
default packed mode's drafts, so the text is fp32's, token for token). `--weights MODE` runs one mode
alone; beam search runs fp32 (HuggingFace's beams), sampling the default mode, through the sampling
kata's chain (solutions.system.decoding) as penalties and logprobs do. The answer streams, whole
characters only and cut before a `--stop` string, then the demo reports time to first token and
decode tokens/s. `--mine` swaps in the learner's passed katas, falling back to the reference.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dojo.practice import report
from dojo.tools.loading import load_smollm2

STARTED = time.perf_counter()  # when the CLI loaded its commands: the start-up line counts from here

# kata -> (the name its file defines, the Parts field it fills)
MINE = {
    "attention": ("attention", "attention_fn"),
    "kv_cache": ("KVCache", "cache_cls"),
    "generate": ("generate", "generate"),
    "speculative": ("speculative_generate", "speculative"),
    "decoder_block": ("Llama", "llama_cls"),
    "sampling": ("make_chain", "make_chain"),
}
BLOCK_LINE = (
    "your decoder_block's Llama runs this answer, forward-only in fp32: no KV cache, so every new token "
    "runs the whole sequence through your 30 blocks again"
)
DRAFT_K = (
    4  # draft tokens per round: near the best of expected_speedup for the int4 draft's measured alpha and c
)


@dataclass
class Parts:
    """The pieces the demo runs: the learner's where they passed, else the reference's."""

    attention_fn: Callable | None = None  # None: the model's own default
    cache_cls: type | None = None
    generate: Callable | None = None
    speculative: Callable | None = None
    llama_cls: type | None = None  # None: the system's model; else your decoder_block's Llama, forward-only
    make_chain: Callable | None = None  # None: the reference sampling kata (its chain and StopChecker)
    mine: list[str] = field(default_factory=list)  # katas whose code is the learner's
    notes: list[str] = field(default_factory=list)  # why a part fell back to the reference


def sampling_module(parts: Parts):
    """The sampling kata whose chain, draw and StopChecker the demo runs: yours where it passed (the
    module that defines your make_chain), else the reference."""
    import solutions.sampling

    return solutions.sampling if parts.make_chain is None else sys.modules[parts.make_chain.__module__]


def keep_block_where_it_runs(args: argparse.Namespace, parts: Parts) -> None:
    """Your decoder_block's Llama runs only as a cache-free fp32 model: with --speculative (which needs a
    KV cache) or another --weights mode the reference runs, and a note says why. Your attention and
    kv_cache go unused beside it (the Llama has its own)."""
    if parts.llama_cls is None:
        return
    if args.speculative or args.weights not in (None, "fp32"):
        why = (
            "--speculative needs a KV cache"
            if args.speculative
            else f"--weights {args.weights}: yours is fp32"
        )
        parts.llama_cls = None
        parts.mine.remove("decoder_block")
        parts.notes.append(f"decoder_block: reference ({why})")
        return
    unused = [slug for slug in ("attention", "kv_cache") if slug in parts.mine]
    if unused:
        parts.notes.append(f"{', '.join(unused)}: yours unused (your decoder_block's Llama has its own)")


def choose_parts(mine: bool) -> Parts:
    """With `mine`, load each passed kata's workspace file; otherwise (or on failure) the reference."""
    from solutions.generate import generate
    from solutions.speculative import speculative_generate

    parts = Parts(generate=generate, speculative=speculative_generate)
    if not mine:
        return parts
    from dojo import targets
    from dojo.practice import history, workspace

    for slug, (name, part) in MINE.items():
        path = workspace.kata_file(slug)
        if not path.exists():
            parts.notes.append(f"{slug}: reference (no {path.name} in your workspace)")
            continue
        if not history.has_passed(slug):
            parts.notes.append(f"{slug}: reference (not passed yet: `dojo check {slug}`)")
            continue
        try:
            value = getattr(targets.load_module(path, f"dojo_demo_{slug}"), name)
        except Exception as exc:  # the learner's file: any failure means the reference runs instead
            why = f"your {path.name} failed to load: {type(exc).__name__}: {exc}"
            parts.notes.append(f"{slug}: reference ({why})")
            continue
        setattr(parts, part, value)
        parts.mine.append(slug)
    return parts


@dataclass(frozen=True)
class Plan:
    """Which weights run: `mode` alone, or `mode` (fp32) verifying the drafts of `draft`."""

    mode: str
    draft: str | None = None

    def describe(self) -> str:
        if self.draft is None:
            return f"{self.mode} weights"
        return f"speculative: {self.mode} verifies {self.draft}'s drafts, k={DRAFT_K} (token-identical to {self.mode})"


def plan(args: argparse.Namespace) -> Plan:
    """The weights for the options: `--weights` alone runs that mode; `--speculative`, or greedy with
    neither it nor `--mine` nor `--weights` where torch has the int4 kernel, runs fp32 verifying int4's
    drafts (bf16's where int4 is missing); `--beams` without `--weights` fp32; anything else the default
    mode; greedy with a penalty or --top-logprobs fp32 alone. ValueError for options that clash with
    speculative decoding, or an unknown mode."""
    from solutions.system.kernels.weight_modes import check_mode, default_mode, draft_mode

    greedy = not args.sample and args.beams == 1
    if args.speculative:
        if not greedy:
            raise ValueError("--speculative is greedy decoding: it does not go with --sample or --beams")
        if penalised(args) or args.top_logprobs:
            raise ValueError(
                "--speculative keeps fp32's plain argmax: it takes no penalty and no --top-logprobs"
            )
        if args.weights not in (None, "fp32"):
            raise ValueError(
                f"--speculative verifies with fp32 weights; --weights {args.weights} cannot verify"
            )
        return Plan("fp32", draft_mode())
    if args.weights is None and (args.beams > 1 or (greedy and (penalised(args) or args.top_logprobs))):
        # beam search is a quality mode: fp32's beams are HuggingFace's, and its native step runs 1-8 rows;
        # greedy through the chain (a penalty, logprobs) cannot be speculative, and fp32's is HF's greedy
        return Plan("fp32")
    if args.weights is None and greedy and not args.mine and draft_mode() != "bf16":
        return Plan("fp32", draft_mode())
    return Plan(check_mode(args.weights or default_mode()))


def penalised(args: argparse.Namespace) -> bool:
    """Whether a repetition, presence or frequency penalty is set."""
    return args.repetition_penalty is not None or bool(args.presence_penalty or args.frequency_penalty)


def generation_kwargs(args: argparse.Namespace) -> dict:
    """generate() keyword arguments from the CLI options; ValueError for options that cannot work."""
    if args.beams < 1 or args.max_new_tokens < 1:
        raise ValueError("--beams and --max-new-tokens must be at least 1")
    if args.beams > 1 and args.sample:
        raise ValueError("--beams and --sample do not go together: beam search here is deterministic")
    if args.beams > 1 and (penalised(args) or args.stop or args.top_logprobs):
        raise ValueError(
            "--beams takes no penalty, --stop or --top-logprobs: beam search here is HuggingFace's plain one"
        )
    if args.min_p is not None and not args.sample:
        raise ValueError("--min-p filters the distribution sampled from: it needs --sample")
    kwargs: dict = dict(max_new_tokens=args.max_new_tokens)
    if args.beams > 1:
        kwargs |= dict(strategy="beam", num_beams=args.beams)
    elif args.sample:
        kwargs |= dict(
            strategy="sample",
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
        )
    return kwargs


def uses_chain(args: argparse.Namespace, parts: Parts) -> bool:
    """Whether the sampling kata's chain picks the tokens (solutions.system.decoding): for a penalty,
    --min-p, --top-logprobs, and sampling unless your passed generate kata runs it. Beam search and
    plain greedy run the generator (or speculative decoding) alone."""
    if args.beams > 1:
        return False
    extra = penalised(args) or args.min_p is not None or args.top_logprobs > 0
    return extra or (args.sample and "generate" not in parts.mine)


def chain_kwargs(args: argparse.Namespace) -> dict:
    """make_chain's arguments: the penalties always; temperature and the filters when sampling."""
    kwargs = dict(
        repetition_penalty=args.repetition_penalty,
        presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty,
    )
    if args.sample:
        kwargs |= dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
    return kwargs


def logprob_lines(steps: list, token_text: Callable[[int], str]) -> list[str]:
    """One line per chosen token (row 0 of each solutions.sampling.Sampled): its text, its logprob and
    the most likely tokens with theirs, all from the distribution it was chosen from."""
    lines = []
    for step in steps:
        top = zip(step.top_ids[0].tolist(), step.top_logprobs[0].tolist())
        alternatives = ", ".join(f"{token_text(i)!r} {lp:.3f}" for i, lp in top)
        lines.append(
            f"  {token_text(int(step.tokens[0]))!r:<14} {float(step.logprobs[0]):8.3f}"
            + (f"   top: {alternatives}" if alternatives else "")
        )
    return lines


class StopStringFound(Exception):
    """Raised from `on_token` once a stop string appears: it ends the generation there."""


class TextStream:
    """Streamed token ids as printable text (solutions.sampling.StopChecker): whole UTF-8 characters
    only, and never the start of a stop string. The first stop string found raises StopStringFound,
    which ends the generation; `finish()` writes what was held back when the answer ended otherwise."""

    def __init__(
        self,
        token_bytes,
        eos: int,
        write: Callable[[str], None],
        stop: list[str] | None = None,
        sampling=None,
    ):
        import solutions.sampling

        self.checker = (sampling or solutions.sampling).StopChecker(token_bytes, stop or [])
        self.eos, self.write = eos, write
        self.tokens = 0  # row 0's tokens so far, the EOS and the stop string's included
        self.first_token_at: float | None = None
        self.stopped_at: float | None = None

    def __call__(self, row: int, token: int) -> None:
        if row != 0:
            return
        if self.stopped_at is not None:  # a generator that swallowed the exception: the answer is over
            raise StopStringFound()
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.tokens += 1
        if token == self.eos:
            return
        shown, stopped = self.checker.feed(token)
        if shown:
            self.write(shown)
        if stopped:
            self.stopped_at = time.perf_counter()
            raise StopStringFound()

    def finish(self) -> None:
        """The answer ended without a stop string: write the text held back (a stop string's start, or
        a character cut off at the end, as U+FFFD)."""
        if rest := self.checker.finish():
            self.write(rest)


def peak_rss_bytes() -> int:
    """This process's peak resident memory (VmHWM: counts from exec, unlike ru_maxrss, which on
    Linux inherits the parent's peak at fork); 0 where /proc is missing."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(args: argparse.Namespace) -> int:
    from solutions.system.openmp_wait import passive_if_busy

    fresh = "torch" not in sys.modules  # a new process (the CLI's), not a host that has torch loaded
    waiting = passive_if_busy()  # before torch loads libgomp, which reads the policy once
    import torch

    # torch's ~170k objects to the permanent generation: the collections that the imports and the load
    # below set off then skip them (a full one over them took ~0.07 s of a ~0.35 s warm start above torch)
    if fresh:
        gc.freeze()

    from solutions.system.kernels.weight_modes import Q8_MODES, describe_mode, resident_bytes, weight_bytes

    out = report.console()
    chosen = plan(args)  # before the slow load, as are the options
    kwargs = generation_kwargs(args)  # before the slow load, so bad options fail fast (ValueError -> exit 1)
    parts = choose_parts(args.mine)
    keep_block_where_it_runs(args, parts)
    sampling = sampling_module(parts)
    chain = sampling.make_chain(**chain_kwargs(args)) if uses_chain(args, parts) else None
    loaded = model = tokenizer = None
    if parts.llama_cls is not None:
        from solutions.system.loading.forward_only import load_forward_only

        try:
            model, tokenizer = load_forward_only(parts.llama_cls)
            chosen = Plan("fp32")
            out.print(BLOCK_LINE, markup=False)
        except Exception as exc:  # the learner's code on the real weights: the reference answers instead
            parts.mine.remove("decoder_block")
            why = f"your Llama failed on SmolLM2's weights: {type(exc).__name__}: {exc}"
            parts.notes.append(f"decoder_block: reference ({why})")
    if args.mine:
        mine = ", ".join(parts.mine) or "none"
        out.print(f"your katas in this run: {mine}", markup=False)
        for note in parts.notes:
            out.print(f"  {note}", markup=False)
        if chain is not None and "generate" in parts.mine:
            out.print(
                "  generate: the system's chain picks these tokens (your generate takes no penalty, "
                "--min-p or --top-logprobs)",
                markup=False,
            )
    note = (lambda s: out.print(f"  {s}", markup=False)) if args.verbose else (lambda s: None)
    if waiting:
        note(waiting)
    if model is None:
        loaded = load_smollm2(chosen.mode, note, attention_fn=parts.attention_fn, cache_cls=parts.cache_cls)
        model, tokenizer = loaded.model, loaded.tokenizer
    draft = (
        load_smollm2(
            chosen.draft,
            note,
            attention_fn=parts.attention_fn,
            cache_cls=parts.cache_cls,
            tokenizer=tokenizer,
        ).model
        if chosen.draft
        else None
    )
    for mode, m in [(chosen.mode, model)] + ([(chosen.draft, draft)] if draft is not None else []):
        if loaded is not None and (
            args.verbose or mode in Q8_MODES
        ):  # a q8 mode's product path (compiled or not, and why) is always said
            out.print(
                f"weights: {mode} ({describe_mode(mode)}), {weight_bytes(m) / 1e6:.0f} MB read per token",
                markup=False,
            )
            if args.verbose and getattr(m, "fused_step", None) is not None:
                out.print(f"  decode steps: {m.fused_step.describe()}", markup=False)
    if args.beams > 1:
        out.print(beam_line(args.beams, chosen), markup=False)
    if chain is not None:
        out.print(chain_line(chain, args), markup=False)
    if args.verbose and loaded is not None:
        out.print(chosen.describe(), markup=False)
        if loaded.calibration is not None:
            out.print(f"  {loaded.calibration.summary()}", markup=False)
        out.print(
            "start-up: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in loaded.seconds.items())
            + f"; {time.perf_counter() - STARTED:.2f} s since the command began"
        )
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": args.question}]))
    token_bytes = tokenizer.token_bytes()
    stream = TextStream(
        token_bytes,
        tokenizer.eos_token_id,
        lambda s: out.print(s, end="", markup=False),
        stop=args.stop,
        sampling=sampling,
    )
    spec = result = chooser = None
    start = time.perf_counter()
    with torch.inference_mode():
        try:
            if draft is not None:
                spec = parts.speculative(
                    model,
                    draft,
                    prompt,
                    eos_token_id=tokenizer.eos_token_id,
                    k=DRAFT_K,
                    on_token=lambda token: stream(0, token),
                    **kwargs,
                )
            elif chain is not None:
                from solutions.system.decoding import Chooser, chain_generate

                chooser = Chooser(
                    chain,
                    [prompt],
                    greedy=not args.sample,
                    seed=args.seed,
                    top_logprobs=args.top_logprobs,
                    sampling=sampling,
                )
                result = chain_generate(
                    model,
                    [prompt],
                    chooser,
                    max_new_tokens=args.max_new_tokens,
                    eos_token_id=tokenizer.eos_token_id,
                    on_token=stream,
                )
            else:
                result = parts.generate(
                    model, [prompt], eos_token_id=tokenizer.eos_token_id, on_token=stream, **kwargs
                )
        except StopStringFound:
            pass  # the stream has the counts and times; the answer ends before the stop string
    ended = stream.stopped_at or time.perf_counter()
    if stream.stopped_at is None:
        stream.finish()
    out.print()
    if args.top_logprobs:
        out.print(
            f"logprobs after the chain, each token's then the {args.top_logprobs} most likely:", markup=False
        )
        for line in logprob_lines(chooser.steps, lambda i: token_bytes[i].decode("utf-8", errors="replace")):
            out.print(line, markup=False)
    streamed = args.beams == 1 and stream.first_token_at is not None  # beam search streams only at the end
    if result is not None and stream.stopped_at is None:
        n_new, prefill_seconds, decode_seconds = (
            len(result.tokens[0]),
            result.prefill_seconds,
            result.decode_seconds,
        )
    else:  # speculative decoding, or a stop string: the stream timed it
        n_new = len(spec.tokens) if spec is not None and stream.stopped_at is None else stream.tokens
        prefill_seconds, decode_seconds = 0.0, ended - (stream.first_token_at or start)
    ttft = stream.first_token_at - start if streamed else prefill_seconds
    out.print(f"prompt tokens: {len(prompt)}   time to first token: {ttft * 1e3:.0f} ms")
    out.print(decode_line(n_new, args.beams, decode_seconds), markup=False)
    if stream.stopped_at is not None:
        out.print(
            f"stop: a stop string ended the answer after {n_new} new tokens (it is not shown)", markup=False
        )
    elif spec is not None:
        out.print(speculative_line(chosen, spec), markup=False)
    if args.verbose and loaded is not None and (peak := peak_rss_bytes()):
        out.print(f"peak RSS: {peak / 1e6:.0f} MB (weights held: {resident_bytes(model) / 1e6:.0f} MB)")
    return 0


def chain_line(chain: list, args: argparse.Namespace) -> str:
    """How the chain picks each token: its processors in order, then a seeded draw or the argmax (greedy's
    temperature of 1 changes nothing, so it is not named)."""
    from solutions.system.decoding import describe_chain

    if not args.sample:
        chain = [p for p in chain if type(p).__name__ != "Temperature"]
        return f"tokens: {describe_chain(chain)}, then the argmax" if chain else "tokens: the argmax"
    seed = "unseeded" if args.seed is None else f"seed {args.seed}"
    return f"tokens: {describe_chain(chain)}, then a draw ({seed})"


def speculative_line(chosen: Plan, result) -> str:
    """How the drafts fared: accepted of drafted, and target passes for the tokens."""
    n, passes = len(result.tokens), result.rounds
    return (
        f"speculative: {chosen.mode} verified {chosen.draft}'s drafts (k={DRAFT_K}): {result.accepted} of "
        f"{result.drafted} accepted ({result.acceptance_rate:.0%}), {passes} {chosen.mode} pass"
        f"{'es' if passes != 1 else ''} for {n} token{'s' if n != 1 else ''}; the text is {chosen.mode}'s "
        f"greedy text"
    )


def beam_line(beams: int, chosen: Plan) -> str:
    """Which beam search runs: its beams and weights mode (the answer comes only at the end)."""
    return f"beam search: {beams} beams on {chosen.mode} weights; the answer comes when the search ends"


def decode_line(n_new: int, beams: int, decode_seconds: float) -> str:
    """The report's decode figures; tokens/s is "-" when no decode step was timed (one new token: the first
    comes from prefill)."""
    steps = n_new - 1
    rate = f"{steps / decode_seconds:.1f}" if steps > 0 and decode_seconds > 0 else "-"
    what = f"{beams} beams, " if beams > 1 else ""
    return (
        f"decode: {n_new} new token{'s' if n_new != 1 else ''} ({what}{steps} decode "
        f"step{'s' if steps != 1 else ''} in {decode_seconds:.2f} s): {rate} tokens/s"
    )


def number(kind: type, ok: Callable[[float], bool], want: str) -> Callable[[str], float]:
    """An argparse type: a finite `kind` (int or float) that `ok` accepts, else a message saying what
    the option must be."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}") from None
        if not math.isfinite(value) or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}")
        return value

    return parse


def nonempty(text: str) -> str:
    """An argparse type: a non-empty string (an empty stop string would stop before the first token)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="chat with SmolLM2 on the reference system (or yours: --mine)")
    p.add_argument("question", help='what to ask, e.g. "What is the capital of France?"')
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="greedy decoding (the default)")
    mode.add_argument(
        "--sample",
        action="store_true",
        help="sample through the sampling kata's chain (see --temperature, --top-p, --top-k, --min-p)",
    )
    p.add_argument("--temperature", type=number(float, lambda v: v > 0, "> 0"), default=0.7)
    p.add_argument("--top-p", type=number(float, lambda v: 0 < v <= 1, "in (0, 1]"), default=0.9)
    p.add_argument("--top-k", type=number(int, lambda v: v >= 1, "an int >= 1"), default=None)
    p.add_argument(
        "--min-p",
        type=number(float, lambda v: 0 <= v <= 1, "in [0, 1]"),
        default=None,
        help="with --sample: keep only tokens at least MIN_P times as probable as the most probable",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--repetition-penalty",
        type=number(float, lambda v: v > 0, "> 0 (1 is no penalty)"),
        default=None,
        metavar="P",
        help="HuggingFace's: a token already in the prompt or answer has its logit divided by P "
        "(multiplied when negative). Greedy with a penalty runs fp32 alone",
    )
    for name, what in (("presence", "once it has appeared"), ("frequency", "for each time it has appeared")):
        p.add_argument(
            f"--{name}-penalty",
            type=number(float, lambda v: True, "a number"),
            default=0.0,
            metavar="X",
            help=f"OpenAI's: subtract X from a token's logit {what} in the answer (not the prompt)",
        )
    p.add_argument(
        "--stop",
        action="append",
        type=nonempty,
        metavar="TEXT",
        help="end the answer where TEXT appears, even across tokens; TEXT is not printed (repeatable)",
    )
    p.add_argument(
        "--top-logprobs",
        type=number(int, lambda v: 1 <= v <= 20, "an int in [1, 20]"),
        default=0,
        metavar="N",
        help="after the answer, each token's logprob and the N most likely tokens', from the distribution "
        "it was chosen from (after the penalties and filters). Greedy with it runs fp32 alone",
    )
    p.add_argument(
        "--beams",
        type=int,
        default=1,
        metavar="N",
        help="beam search with N beams, on fp32 weights unless --weights (answer shown at the end)",
    )
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N")
    p.add_argument(
        "--mine",
        action="store_true",
        help="use your passed katas: attention, kv_cache, generate, speculative (with --speculative), "
        "decoder_block (forward-only in fp32: slow), sampling (its chain and stop strings)",
    )
    p.add_argument(
        "--speculative",
        action="store_true",
        help="greedy by speculative decoding: fp32 verifies the default packed mode's drafts "
        "(int4-q8x2 with the compiled kernel, else int4, else bf16); the text is fp32's, "
        "token-identical to HuggingFace's. The default for greedy where a packed mode runs",
    )
    p.add_argument(
        "--weights",
        default=None,
        metavar="MODE",
        help="run fp32, bf16, int4, int4-q8 or int4-q8x2 weights alone. Only fp32 (and speculative "
        "decoding, which verifies with fp32) is token-identical to HuggingFace; the others agree "
        "with fp32 on 93-100%% of tokens teacher-forced, and free-running text can part from "
        "fp32's after a near-tie. Default: speculative for greedy, fp32 for --beams; otherwise "
        "int4-q8x2 where the compiled kernel is built, else int4 where torch has its kernel, else fp32",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="say what the cache and the calibration did, and start-up times",
    )
    p.set_defaults(func=run, fast_exit=True)
