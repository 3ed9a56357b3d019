"""BPE training and encoding speed: the reference against the recount oracle and two Rust peers.

Training (0.5 MB, threshold 2, 5 000 merges; GPT-2 split and none) against `tokenizers`' BpeTrainer
and the kata suite's recount oracle, estimated from its first merges and the tokens left before each
later one. Encoding with SmolLM2's vocabulary against tiktoken (offline ranks) and `tokenizers`,
outputs checked identical first. The text is the standard library's docstrings. Ratios > 1: ours wins.

    python -m benchmarks.bpe_bench [--quick]
"""

from __future__ import annotations

import argparse
import ast
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from solutions.bpe import GPT2_PATTERN, BPETokenizer, bytes_to_unicode

TRAIN_BYTES, MERGES, THRESHOLD = 500_000, 5000, 2


def stdlib_docstrings() -> str:
    """Every docstring of the standard library's top-level modules, sorted by file name."""
    parts = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    parts.append(doc)
    return "\n\n".join(parts)


def fastest(
    contestants: dict[str, Callable[[], Callable[[], object]]],
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Fastest time of each contestant over `repeats` rounds, run in turn (A B A B ...) so that
    load from elsewhere hits all alike. A contestant is a setup (untimed) returning the timed call."""
    best = dict.fromkeys(contestants, float("inf"))
    for _ in range(repeats):
        for name, setup in contestants.items():
            call = setup()
            start = clock()
            call()
            best[name] = min(best[name], clock() - start)
    return best


def hf_train(text: str, merges: int, threshold: int, split: bool) -> int:
    """Train `tokenizers`' BpeTrainer byte-level; returns the number of merges it made."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split)
    trainer = trainers.BpeTrainer(
        vocab_size=256 + merges,
        min_frequency=threshold,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([text], trainer)
    return len(json.loads(tok.to_str())["model"]["merges"])


def oracle_estimate(text: str, pattern: str | None, tok: BPETokenizer, sample_merges: int) -> float:
    """Seconds the recount oracle would need for all of tok's merges (see the module docstring)."""
    from tests.katas.test_bpe import oracle_train

    start = time.perf_counter()
    oracle_train(text, threshold=THRESHOLD, max_merges=sample_merges, pattern=pattern)
    sampled = time.perf_counter() - start
    # Tokens left after i merges at a few i (the first i merges are themselves a trained
    # tokenizer), measured on a 100 KB sample, linear in between: the oracle recounts them all.
    n, sample = len(tok.merges), text[:100_000]
    points = sorted({0, sample_merges, n // 20, n // 5, n // 2, n})
    left = {i: len(truncated(tok, i).encode(sample)) for i in points}
    per_merge = [0.0] * n
    for lo, hi in zip(points, points[1:]):
        for i in range(lo, hi):
            per_merge[i] = left[lo] + (left[hi] - left[lo]) * (i - lo) / (hi - lo)
    return sampled * sum(per_merge) / sum(per_merge[:sample_merges])


def truncated(tok: BPETokenizer, n: int) -> BPETokenizer:
    """tok with only its first n merges, through save and load."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tok.bpe"
        tok.save(path)
        lines = path.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if not line.startswith("merge ")] + [
            f"merge {a} {b}" for a, b in list(tok.merges)[:n]
        ]
        path.write_text("\n".join(kept) + "\n", encoding="utf-8")
        return BPETokenizer.load(path)


def train_rows(text: str, *, merges: int = MERGES, oracle_sample: int = 3) -> list[dict]:
    rows = []
    for label, pattern in (("GPT-2 split", GPT2_PATTERN), ("no split", None)):
        split = pattern is not None
        tok = BPETokenizer(pattern)
        made: list[int] = []  # how many merges the peer made
        t = fastest(
            {
                "ours": lambda: partial(tok.train, text, threshold=THRESHOLD, max_merges=merges),
                "hf": lambda: lambda: made.append(hf_train(text, merges, THRESHOLD, split)),
            },
            3 if split else 1,
        )
        ours, hf = t["ours"], t["hf"]
        oracle = oracle_estimate(text, pattern, tok, oracle_sample)
        goal = 1.0 if pattern else 10.0
        rows.append(
            dict(
                name=f"train {len(text) / 1e6:.2f} MB, {label}, {len(tok.merges)} merges",
                seconds=ours,
                peer=f"tokenizers BpeTrainer ({made[-1]} merges)",
                peer_seconds=hf,
                ratio=hf / ours,
                goal=f">= {goal:g}x",
                ok=hf / ours >= goal,
            )
        )
        rows.append(
            dict(
                name=f"train {len(text) / 1e6:.2f} MB, {label}, {len(tok.merges)} merges",
                seconds=ours,
                peer=f"recount oracle (est. from {oracle_sample} merges)",
                peer_seconds=oracle,
                ratio=oracle / ours,
                goal=">= 20x",
                ok=oracle / ours >= 20,
            )
        )
    return rows


def encode_rows(text: str, repeats: int = 3) -> list[dict]:
    import tiktoken

    from solutions.system.loading.tokenizer import SMOLLM_PATTERN
    from solutions.system.loading.weights import find_gguf, open_gguf
    from tests.system.test_tokenizer import tokenizers_peer

    reader = open_gguf(find_gguf())
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    merges = reader.fields["tokenizer.ggml.merges"].contents()
    specials = {t: i for i, (t, kind) in enumerate(zip(tokens, types)) if kind == 3}
    vocab = {t: i for i, t in enumerate(tokens)}

    def fresh() -> BPETokenizer:
        return BPETokenizer.from_gpt2(vocab, merges, SMOLLM_PATTERN, specials)

    to_byte = {ch: b for b, ch in bytes_to_unicode().items()}
    ranks = {bytes(to_byte[c] for c in t): i for t, i in vocab.items() if t not in specials}
    tik = tiktoken.Encoding(
        "smollm2-offline", pat_str=SMOLLM_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )
    hf = tokenizers_peer(reader)

    want = fresh().encode(text)
    for name, got in (
        ("tiktoken", tik.encode(text, allowed_special="all")),
        ("tokenizers", hf.encode(text).ids),
    ):
        if got != want:
            first = (
                next(i for i, (a, b) in enumerate(zip(got, want)) if a != b) if len(got) == len(want) else -1
            )
            raise AssertionError(
                f"{name} encodes the benchmark text differently (first difference at {first})"
            )

    # Single-threaded on every side, so CPU time: steadier than wall time on a shared machine.
    mb = len(text.encode("utf-8")) / 1e6
    t = fastest(
        {
            "ours": lambda: partial(fresh().encode, text),  # a fresh tokenizer: cold cache
            "tiktoken": lambda: lambda: tik.encode(text, allowed_special="all"),
            "tokenizers": lambda: lambda: hf.encode(text),
        },
        repeats,
        clock=time.process_time,
    )
    rows = []
    for key, peer, goal in (
        ("tiktoken", "tiktoken (offline ranks)", 1 / 3),
        ("tokenizers", "tokenizers BPE", None),
    ):
        ratio = t[key] / t["ours"]
        rows.append(
            dict(
                name=f"encode {mb:.2f} MB, SmolLM2 vocab, cold cache",
                mb_per_s=mb / t["ours"],
                peer=peer,
                peer_mb_per_s=mb / t[key],
                ratio=ratio,
                goal=">= 1/3x (CPU time)" if goal else "- (CPU time)",
                ok=None if goal is None else ratio >= goal,
            )
        )
    return rows


def row_groups(quick: bool = False) -> Iterator[list[dict]]:
    """The rows, a group at a time (training, then encoding); `quick` trains on 0.1 MB with
    1 000 merges (a smoke run)."""
    text = stdlib_docstrings()
    yield train_rows(text[: TRAIN_BYTES // 5 if quick else TRAIN_BYTES], merges=1000 if quick else MERGES)
    yield encode_rows(text[TRAIN_BYTES:])


def rows(quick: bool = False) -> list[dict]:
    """All rows, as dicts: name, seconds or mb_per_s, peer, peer_seconds or peer_mb_per_s,
    ratio (ours over the peer, in speed), goal, ok."""
    return [row for group in row_groups(quick) for row in group]


def format_row(row: dict) -> str:
    if "seconds" in row:
        ours, theirs = f"{row['seconds']:8.3f} s", f"{row['peer_seconds']:8.3f} s"
    else:
        ours, theirs = f"{row['mb_per_s']:6.2f} MB/s", f"{row['peer_mb_per_s']:6.2f} MB/s"
    mark = {True: "ok", False: "MISSED", None: ""}[row["ok"]]
    return f"{row['name']:<46} {ours}  vs {row['peer']:<36} {theirs}  {row['ratio']:7.2f}x (goal {row['goal']}) {mark}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.1 MB and 1000 merges for training")
    args = parser.parse_args()
    for group in row_groups(args.quick):
        for row in group:
            print(format_row(row), flush=True)


if __name__ == "__main__":
    main()
