"""`dojo demo "question"`: SmolLM2 answers a chat question on the reference inference system.

Greedy answers come by default from speculative decoding (solutions.speculative: fp32 verifies the
default packed mode's drafts, so the text is fp32's, token for token). `--weights MODE` runs one mode
alone; beam search runs fp32 (HuggingFace's beams), sampling the default mode. The answer streams,
then the demo reports time to first token and decode tokens/s. `--mine` swaps in the learner's passed
katas, falling back to the reference. Everything but argument parsing and printing is importable.
"""

from __future__ import annotations

import argparse
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
}
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
    mine: list[str] = field(default_factory=list)  # katas whose code is the learner's
    notes: list[str] = field(default_factory=list)  # why a part fell back to the reference


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
    mode. ValueError for options that clash with speculative decoding, or an unknown mode."""
    from solutions.system.kernels.weight_modes import check_mode, default_mode, draft_mode

    greedy = not args.sample and args.beams == 1
    if args.speculative:
        if not greedy:
            raise ValueError("--speculative is greedy decoding: it does not go with --sample or --beams")
        if args.weights not in (None, "fp32"):
            raise ValueError(
                f"--speculative verifies with fp32 weights; --weights {args.weights} cannot verify"
            )
        return Plan("fp32", draft_mode())
    if args.weights is None and args.beams > 1:
        # beam search is a quality mode: fp32's beams are HuggingFace's, and its native step runs 1-8 rows
        return Plan("fp32")
    if args.weights is None and greedy and not args.mine and draft_mode() != "bf16":
        return Plan("fp32", draft_mode())
    return Plan(check_mode(args.weights or default_mode()))


def generation_kwargs(args: argparse.Namespace) -> dict:
    """generate() keyword arguments from the CLI options; ValueError for options that cannot work."""
    if args.beams < 1 or args.max_new_tokens < 1:
        raise ValueError("--beams and --max-new-tokens must be at least 1")
    if args.beams > 1 and args.sample:
        raise ValueError("--beams and --sample do not go together: beam search here is deterministic")
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


class TextStream:
    """Turns streamed token ids into printable text pieces (holding back a half-decoded character)."""

    def __init__(self, tokenizer, eos: int, write: Callable[[str], None]):
        self.tokenizer, self.eos, self.write = tokenizer, eos, write
        self.ids: list[int] = []
        self.shown = 0
        self.first_token_at: float | None = None

    def __call__(self, row: int, token: int) -> None:
        if row != 0:
            return
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        if token == self.eos:
            return
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        if not text.endswith("\ufffd"):  # a multi-byte character split across tokens: wait for the rest
            self.write(text[self.shown :])
            self.shown = len(text)


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
    import torch

    from solutions.system.kernels.weight_modes import Q8_MODES, describe_mode, resident_bytes, weight_bytes

    out = report.console()
    chosen = plan(args)  # before the slow load, as are the options
    kwargs = generation_kwargs(args)  # before the slow load, so bad options fail fast (ValueError -> exit 1)
    parts = choose_parts(args.mine)
    if args.mine:
        mine = ", ".join(parts.mine) or "none"
        out.print(f"your katas in this run: {mine}", markup=False)
        for note in parts.notes:
            out.print(f"  {note}", markup=False)
    note = (lambda s: out.print(f"  {s}", markup=False)) if args.verbose else (lambda s: None)
    loaded = load_smollm2(chosen.mode, note, attention_fn=parts.attention_fn, cache_cls=parts.cache_cls)
    model, tokenizer = loaded.model, loaded.tokenizer
    draft = (
        load_smollm2(chosen.draft, note, attention_fn=parts.attention_fn, cache_cls=parts.cache_cls).model
        if chosen.draft
        else None
    )
    for mode, m in [(chosen.mode, model)] + ([(chosen.draft, draft)] if draft is not None else []):
        if (
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
    if args.verbose:
        out.print(chosen.describe(), markup=False)
        if loaded.calibration is not None:
            out.print(f"  {loaded.calibration.summary()}", markup=False)
        out.print(
            "start-up: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in loaded.seconds.items())
            + f"; {time.perf_counter() - STARTED:.2f} s since the command began"
        )
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": args.question}]))
    stream = TextStream(tokenizer, tokenizer.eos_token_id, lambda s: out.print(s, end="", markup=False))
    start = time.perf_counter()
    with torch.inference_mode():
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
            new_tokens, prefill_seconds = spec.tokens, 0.0
            decode_seconds = time.perf_counter() - (stream.first_token_at or start)
        else:
            result = parts.generate(
                model, [prompt], eos_token_id=tokenizer.eos_token_id, on_token=stream, **kwargs
            )
            new_tokens, prefill_seconds, decode_seconds = (
                result.tokens[0],
                result.prefill_seconds,
                result.decode_seconds,
            )
    out.print()
    n_new = len(new_tokens)
    streamed = args.beams == 1 and stream.first_token_at is not None  # beam search streams only at the end
    ttft = stream.first_token_at - start if streamed else prefill_seconds
    out.print(f"prompt tokens: {len(prompt)}   time to first token: {ttft * 1e3:.0f} ms")
    out.print(decode_line(n_new, args.beams, decode_seconds), markup=False)
    if draft is not None:
        out.print(speculative_line(chosen, spec), markup=False)
    if args.verbose and (peak := peak_rss_bytes()):
        out.print(f"peak RSS: {peak / 1e6:.0f} MB (weights held: {resident_bytes(model) / 1e6:.0f} MB)")
    return 0


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


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="chat with SmolLM2 on the reference system (or yours: --mine)")
    p.add_argument("question", help='what to ask, e.g. "What is the capital of France?"')
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="greedy decoding (the default)")
    mode.add_argument("--sample", action="store_true", help="sample (see --temperature, --top-p)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
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
        help="use your passed katas: attention, kv_cache, generate, speculative (with --speculative)",
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
