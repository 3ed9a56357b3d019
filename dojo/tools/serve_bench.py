"""`dojo bench serve`: a load generator against `dojo serve` (llama.cpp's server beside it with --peers,
or a server already running with --url).

At each concurrency level, that many clients send streamed chat completions back to back for a fixed
time. Per request it records TTFT and TPOT; per level, output tokens/s and TTFT and TPOT p50 / p99 (from
enough samples only), in a table, a plot (bench/serve.png under the workspace) and, with --json, a file.
Each server runs as its own process, so the load generator never shares an interpreter with it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from dojo.errors import UsageError

QUESTIONS = (
    "Write a short story about a robot who learns to paint.",
    "Explain how a bicycle works to a ten-year-old.",
    "Describe the water cycle in detail.",
    "Write a poem about the sea at night.",
    "What are the main causes of the French Revolution?",
    "Give me a recipe for pancakes, step by step.",
    "Explain what a neural network is.",
    "Describe a day in the life of a medieval farmer.",
)
GOAL_CLIENTS, GOAL_RATIO = 8, 3.0  # the goal: at 8 clients, at least 3x the tokens/s of 1
# Beside llama.cpp's server (--peers): at 1 client at least PEER_RATE x its tokens/s, and a long
# prompt's time to first token at most PEER_TTFT x its.
PEER_RATE, PEER_TTFT = 1.0, 1.5
LONG_ITEMS = (
    130  # items of the long prompt: about 2,000 tokens with SmolLM2's tokenizer (usage says how many)
)
# The fewest samples a percentile is reported from. p50: 6, the fewest whose smallest and largest
# bracket the true median with 95% probability (1 - 2 * 0.5**n >= 0.95). p99: 100, the fewest with
# one sample expected above the true p99; from fewer, "p99" is the largest sample under another name.
MIN_SAMPLES = {50: 6, 99: 100}


@dataclass
class Sample:
    """One request: seconds to its first text, seconds per later token (None for one token), tokens."""

    ttft: float
    tpot: float | None
    tokens: int


@dataclass
class Level:
    """One concurrency level: every finished request, and the wall time they took together."""

    concurrency: int
    samples: list[Sample]
    seconds: float
    errors: int
    first_error: str = ""  # what the first failed request said

    @property
    def tokens_per_s(self) -> float:
        return sum(s.tokens for s in self.samples) / self.seconds if self.seconds > 0 else 0.0


@dataclass
class LongPrompt:
    """Requests of about 2,000 prompt tokens, one at a time: seconds to the answer of one token each."""

    seconds: list[float]
    prompt_tokens: list[int]

    @property
    def median_ms(self) -> float | None:
        return percentile(self.seconds, 50) * 1e3 if self.seconds else None


def long_prompt(tag: int) -> str:
    """About 2,000 tokens of plain text, starting with `tag`: no two requests share a first block, so no
    server's prefix cache answers part of one from another."""
    items = " ".join(f"Item {k + 1}: {QUESTIONS[k % len(QUESTIONS)]}" for k in range(LONG_ITEMS))
    return f"Bench note {tag}. {items} Which item is about the sea?"


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between ranks; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    rank = (len(xs) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (xs[high] - xs[low]) * (rank - low)


def reported(values: list[float], q: int) -> float | None:
    """percentile(values, q) from at least MIN_SAMPLES[q] values; None from fewer."""
    return percentile(values, q) if len(values) >= MIN_SAMPLES[q] else None


def ttfts_ms(level: Level) -> list[float]:
    return [s.ttft * 1e3 for s in level.samples]


def tpots_ms(level: Level) -> list[float]:
    return [s.tpot * 1e3 for s in level.samples if s.tpot is not None]  # a one-token answer has none


async def one_request(client, url: str, model: str, question: str, max_tokens: int) -> Sample:
    """Send one streamed chat completion and time it. Raises httpx's errors, and ValueError for a
    stream without text."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    stamps: list[float] = []
    usage = None
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                stamps.append(time.perf_counter())
    if not stamps:
        raise ValueError("the server streamed no text")
    tokens = usage["completion_tokens"] if usage else len(stamps)
    tpot = (stamps[-1] - stamps[0]) / (tokens - 1) if tokens > 1 else None
    return Sample(stamps[0] - sent, tpot, tokens)


async def run_level(url: str, model: str, concurrency: int, seconds: float, max_tokens: int) -> Level:
    """`concurrency` clients asking back to back for `seconds`, each at least once (a client that starts
    late on a busy machine still asks); requests in flight then finish."""
    import httpx

    samples: list[Sample] = []
    errors, first_error = 0, ""
    start = time.perf_counter()

    async def client_loop(worker: int, client) -> None:
        nonlocal errors, first_error
        n, asked = worker, False
        while not asked or time.perf_counter() - start < seconds:
            asked = True
            try:
                samples.append(
                    await one_request(client, url, model, QUESTIONS[n % len(QUESTIONS)], max_tokens)
                )
            except (httpx.HTTPError, ValueError) as exc:
                errors += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}"[:200]
            n += concurrency

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=limits) as client:
        await asyncio.gather(*(client_loop(w, client) for w in range(concurrency)))
    return Level(concurrency, samples, time.perf_counter() - start, errors, first_error)


async def one_long_request(url: str, model: str, tag: int) -> tuple[float, int]:
    """One long prompt, one token of answer, not streamed: (seconds to the answer, prompt tokens)."""
    import httpx

    body = {
        "model": model,
        "messages": [{"role": "user", "content": long_prompt(tag)}],
        "max_tokens": 1,
        "temperature": 0,
    }
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        sent = time.perf_counter()
        response = await client.post(f"{url}/v1/chat/completions", json=body)
        took = time.perf_counter() - sent
        response.raise_for_status()
    return took, int(response.json()["usage"]["prompt_tokens"])


def measure_long(name: str, url: str, model: str, runs: int) -> LongPrompt | None:
    """`runs` long prompts one after another (each its own tag); None for runs 0. ValueError naming the
    server if one fails."""
    import httpx

    if runs == 0:
        return None
    out = LongPrompt([], [])
    for tag in range(runs):
        try:
            seconds, tokens = asyncio.run(one_long_request(url, model, tag))
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise ValueError(f"{name} failed a long-prompt request: {type(exc).__name__}: {exc}") from exc
        out.seconds.append(seconds)
        out.prompt_tokens.append(tokens)
    print(
        f"  {name}: long prompt ({out.prompt_tokens[0]} tokens): time to first token "
        f"{out.median_ms:.0f} ms (median of {runs})",
        flush=True,
    )
    return out


# --------------------------------------------------------------------------- the servers


class ServerProcess:
    """A server in a child process: started with `command`, ready once GET url/health (or /v1/models)
    answers, and terminated on leaving. Raises RuntimeError if it exits or is not ready in `timeout` s."""

    def __init__(self, command: list[str], url: str | None, timeout: float = 600.0, env: dict | None = None):
        self.command, self.url, self.timeout, self.env = command, url, timeout, env

    def __enter__(self) -> str:
        import httpx

        self.proc = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env
        )
        deadline = time.monotonic() + self.timeout
        url = self.url
        while url is None:  # dojo serve prints its URL: read it
            line = self.proc.stdout.readline()
            if not line:
                self.__exit__()
                raise RuntimeError(f"{self.command[2]} exited before serving")
            if match := re.search(r"(http://[\w.\[\]:]+)/v1", line):
                url = match.group(1)
        threading.Thread(target=self._drain, daemon=True).start()  # a full pipe would block the server
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{' '.join(self.command[:3])} exited with {self.proc.returncode}")
            try:
                httpx.get(f"{url}/v1/models", timeout=2.0).raise_for_status()
                return url
            except httpx.HTTPError:
                time.sleep(0.5)
        self.__exit__()
        raise RuntimeError(f"{' '.join(self.command[:3])} was not ready in {self.timeout:.0f} s")

    def _drain(self) -> None:
        for _ in self.proc.stdout:
            pass

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port() -> int:
    from solutions.system.serving.server import bind

    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return port


Measured = tuple[list[Level], LongPrompt | None]  # a server's levels, and its long prompts


def measure_server(name: str, command: list[str], url: str | None, model: str, args, env=None) -> Measured:
    """Start a server, then measure it."""
    with ServerProcess(command, url, env=env) as base:
        return measure(name, base, model, args)


def measure(name: str, url: str, model: str, args) -> Measured:
    """Warm the server at `url` with one request, run every concurrency level against it, then the long
    prompts (--long-prompts of them). ValueError if the warm-up request or a long prompt fails."""
    import httpx

    try:
        asyncio.run(one_request_with_client(url, model))
    except (httpx.HTTPError, ValueError) as exc:
        raise ValueError(f"{name} at {url} failed a first chat request: {type(exc).__name__}: {exc}") from exc
    levels = []
    for c in args.concurrency:
        level = asyncio.run(run_level(url, model, c, args.seconds, args.max_tokens))
        print(
            f"  {name}: concurrency {c:>2}: {len(level.samples)} requests, "
            f"{level.tokens_per_s:.1f} tokens/s"
            + (f", {level.errors} errors (the first: {level.first_error})" if level.errors else ""),
            flush=True,
        )
        levels.append(level)
    return levels, measure_long(name, url, model, args.long_prompts)


def base_url(text: str) -> str:
    """A server's base URL from --url (a trailing /v1 or / dropped). UsageError unless http(s)://HOST."""
    url = text.strip().rstrip("/").removesuffix("/v1")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--url wants a server's address such as http://127.0.0.1:8000, not {text!r}")
    return url


def probe(url: str) -> str:
    """The model to ask the server at `url` for: the first GET /v1/models lists, else `dojo serve`'s
    if a one-token chat completion answers. ValueError saying what each answered when neither does."""
    import httpx

    from solutions.system.serving.server import MODEL_ID

    try:
        response = httpx.get(f"{url}/v1/models", timeout=10.0)
        response.raise_for_status()
        return response.json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        models = f"{type(exc).__name__}: {exc}"[:200]
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    try:
        httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60.0).raise_for_status()
        return MODEL_ID
    except httpx.HTTPError as exc:
        chat = f"{type(exc).__name__}: {exc}"[:200]
    raise ValueError(
        f"no OpenAI-compatible server answers at {url}: GET /v1/models gave {models}; "
        f"POST /v1/chat/completions gave {chat}"
    )


async def one_request_with_client(url: str, model: str) -> Sample:
    import httpx

    async with httpx.AsyncClient(timeout=300.0) as client:
        return await one_request(client, url, model, QUESTIONS[0], 8)


# --------------------------------------------------------------------------- the report


def table(results: dict[str, list[Level]]) -> list[str]:
    """One row per server and level: requests, tokens/s, x its concurrency 1, TTFT and TPOT p50 / p99;
    "n/a (k)" for a percentile from k samples, too few (MIN_SAMPLES), and a line below that says so."""
    lines = [
        f"  {'server':<10}{'conc':>5}{'reqs':>6}{'tok/s':>9}{'x c=1':>7}{'TTFT p50':>10}{'p99':>10}"
        f"{'TPOT p50':>10}{'p99':>10}   (ms)"
    ]
    too_few = False
    for name, levels in results.items():
        base = next((lv.tokens_per_s for lv in levels if lv.concurrency == 1), None)
        for lv in levels:
            cells = []
            for values in (ttfts_ms(lv), tpots_ms(lv)):
                for q in (50, 99):
                    v = reported(values, q)
                    too_few |= v is None
                    cells.append(f"n/a ({len(values)})" if v is None else f"{v:.0f}")
            ratio = f"{lv.tokens_per_s / base:.2f}" if base else "-"
            lines.append(
                f"  {name:<10}{lv.concurrency:>5}{len(lv.samples):>6}{lv.tokens_per_s:>9.1f}{ratio:>7}"
                + "".join(f"{cell:>10}" for cell in cells)
                + (f"   {lv.errors} errors" if lv.errors else "")
            )
    if too_few:
        lines.append(
            f"  n/a (k): k samples are too few for that percentile (p50 needs {MIN_SAMPLES[50]}, "
            f"p99 {MIN_SAMPLES[99]}); a longer --seconds gives more"
        )
    return lines


def goal(levels: list[Level]) -> float | None:
    """Tokens/s at GOAL_CLIENTS over tokens/s at 1 client; None unless both levels ran (and 1 made tokens)."""
    rates = {lv.concurrency: lv.tokens_per_s for lv in levels}
    if rates.get(1) and GOAL_CLIENTS in rates:
        return rates[GOAL_CLIENTS] / rates[1]
    return None


def figure(results: dict[str, list[Level]]):
    """Throughput, TTFT and TPOT against clients, each y-axis from 0; on the throughput panel, the goal
    line (GOAL_RATIO x the first server's tokens/s at 1 client) where it ran 1 client. A percentile from
    too few samples is not drawn."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), dpi=100)
    axes = fig.subplots(1, 3)
    for name, levels in results.items():
        xs = [lv.concurrency for lv in levels]
        axes[0].plot(xs, [lv.tokens_per_s for lv in levels], "o-", label=name)
        for ax, values_of in ((axes[1], ttfts_ms), (axes[2], tpots_ms)):
            for q, style in ((50, "o-"), (99, "x--")):
                ys = [reported(values_of(lv), q) for lv in levels]
                ax.plot(xs, [float("nan") if y is None else y for y in ys], style, label=f"{name} p{q}")
    name, levels = next(iter(results.items()))
    if base := next((lv.tokens_per_s for lv in levels if lv.concurrency == 1), None):
        label = f"goal: {GOAL_RATIO:g}x {name}'s 1-client tokens/s at {GOAL_CLIENTS} clients"
        axes[0].axhline(GOAL_RATIO * base, color="grey", linestyle=":", label=label)
    for ax, ylabel, title in (
        (axes[0], "output tokens/s", "throughput"),
        (axes[1], "ms", "time to first token"),
        (axes[2], "ms", "time per output token"),
    ):
        xs = sorted({lv.concurrency for levels in results.values() for lv in levels})
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot(results: dict[str, list[Level]], path: Path) -> Path:
    figure(results).savefig(path)
    return path


def peer_ratios(results: dict[str, list[Level]], longs: dict[str, LongPrompt]) -> dict[str, float | None]:
    """Ours (the first server) over llama.cpp's: tokens/s at 1 client, and the long prompt's median time
    to first token; None where either was not measured."""
    ours, peer = next(iter(results), None), "llama.cpp"
    if peer not in results or ours == peer:
        return {}
    rate = {
        name: next((lv.tokens_per_s for lv in results[name] if lv.concurrency == 1), 0.0)
        for name in (ours, peer)
    }
    ttft = {name: longs[name].median_ms if name in longs else None for name in (ours, peer)}
    return {
        "rate_at_1": rate[ours] / rate[peer] if rate[ours] and rate[peer] else None,
        "long_ttft": ttft[ours] / ttft[peer] if ttft[ours] and ttft[peer] else None,
    }


def peer_goals(results: dict[str, list[Level]], longs: dict[str, LongPrompt]) -> list[str]:
    """The goals beside llama.cpp's server, met or not, where it ran."""
    ratios = peer_ratios(results, longs)
    if not ratios:
        return []
    met = {"rate_at_1": lambda r: r >= PEER_RATE, "long_ttft": lambda r: r <= PEER_TTFT}
    what = {
        "rate_at_1": f"at 1 client, at least {PEER_RATE:g}x llama.cpp's tokens/s",
        "long_ttft": f"a long prompt's time to first token at most {PEER_TTFT:g}x llama.cpp's",
    }
    lines = []
    for key, r in ratios.items():
        verdict = "not measured" if r is None else f"{r:.2f}x ({'met' if met[key](r) else 'not met'})"
        lines.append(f"  goal: {what[key]}: {verdict}")
    return lines


def write_json(
    results: dict[str, list[Level]], path: Path, longs: dict[str, LongPrompt] | None = None
) -> None:
    """Every server's levels (with their percentiles, null from too few samples) and requests, its long
    prompts, and the ratios to llama.cpp's where it ran, atomically."""
    longs = longs or {}
    report = {
        "min_samples": {f"p{q}": n for q, n in MIN_SAMPLES.items()},
        "goal": {"clients": GOAL_CLIENTS, "ratio": GOAL_RATIO},
        "peer_goals": {"rate_at_1_at_least": PEER_RATE, "long_ttft_at_most": PEER_TTFT},
        "peer_ratios": peer_ratios(results, longs),
        "long_prompt": {
            name: {
                "prompt_tokens": long.prompt_tokens,
                "ttft_ms": [t * 1e3 for t in long.seconds],
                "ttft_median_ms": long.median_ms,
            }
            for name, long in longs.items()
        },
        "servers": {
            name: [
                {
                    "concurrency": lv.concurrency,
                    "requests": len(lv.samples),
                    "errors": lv.errors,
                    "first_error": lv.first_error,
                    "seconds": lv.seconds,
                    "tokens_per_s": lv.tokens_per_s,
                    **{
                        f"{what}_p{q}_ms": reported(values, q)
                        for what, values in (("ttft", ttfts_ms(lv)), ("tpot", tpots_ms(lv)))
                        for q in (50, 99)
                    },
                    "samples": [asdict(sample) for sample in lv.samples],
                }
                for lv in levels
            ]
            for name, levels in results.items()
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)


def run(args: argparse.Namespace) -> int:
    """Measure (the server at --url, else a `dojo serve` started here and, with --peers, llama.cpp's),
    print the table and the goal, plot to bench/serve.png under the workspace, write --json."""
    from dojo.targets import workspace_dir

    if args.long_prompts < 0:
        raise UsageError(
            f"--long-prompts is how many long prompts each server answers: 0 or more, not {args.long_prompts}"
        )
    if args.url is not None:
        flags = [
            f
            for f, on in (("--weights", args.weights), ("--threads", args.threads), ("--peers", args.peers))
            if on
        ]
        if flags:
            raise UsageError(
                f"--url measures a server already running and starts none; {' and '.join(flags)} "
                f"only set{'s' * (len(flags) == 1)} the servers it starts"
            )
        url = base_url(args.url)
        model = probe(url)
        print(
            f"dojo bench serve: the server at {url} ({model}); {args.max_tokens} new tokens a request, "
            f"{args.seconds:g} s a level, concurrency {', '.join(map(str, args.concurrency))}",
            flush=True,
        )
        measured = {"server": measure("server", url, model, args)}
    else:
        measured = measure_started(args)
    results = {name: levels for name, (levels, _) in measured.items()}
    longs = {name: long for name, (_, long) in measured.items() if long is not None}
    print("\n".join(table(results)))
    name, levels = next(iter(results.items()))
    if (ratio := goal(levels)) is not None:
        print(
            f"  goal: at concurrency {GOAL_CLIENTS}, at least {GOAL_RATIO:g}x the tokens/s of concurrency 1: "
            f"{ratio:.2f}x ({'met' if ratio >= GOAL_RATIO else 'not met'})"
        )
    else:
        print(f"  goal: not measured (--concurrency needs 1 and {GOAL_CLIENTS}, and 1 client's tokens)")
    for line in peer_goals(results, longs):
        print(line)
    folder = workspace_dir() / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"  plot: {plot(results, folder / 'serve.png')}")
    if args.json is not None:
        write_json(results, args.json, longs)
        print(f"  json: {args.json}")
    return 0


def measure_started(args: argparse.Namespace) -> dict[str, Measured]:
    """`dojo serve` started in a process of its own and measured; then, with --peers, llama.cpp's."""
    from solutions.system.serving.server import MODEL_ID

    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")])
        )
    }
    ours = [sys.executable, "-m", "dojo", "serve", "--port", "0"] + (
        ["--weights", args.weights] if args.weights else []
    )
    ours += ["--threads", str(args.threads)] if args.threads else []
    print(
        f"dojo bench serve: {args.max_tokens} new tokens a request, {args.seconds:g} s a level, "
        f"concurrency {', '.join(map(str, args.concurrency))}; weights {args.weights or 'default'}, "
        f"{args.threads or 'default'} threads",
        flush=True,
    )
    results = {"dojo": measure_server("dojo", ours, None, MODEL_ID, args, env)}
    if args.peers and (peer := measure_peer(args)) is not None:
        results["llama.cpp"] = peer
    return results


def cpu_lists_amx() -> bool:
    """Whether /proc/cpuinfo lists an AMX flag (amx_tile, amx_int8, ...)."""
    try:
        return bool(re.search(r"\bamx_\w+", Path("/proc/cpuinfo").read_text()))
    except OSError:
        return False


def measure_peer(args: argparse.Namespace) -> Measured | None:
    """llama.cpp's server on the same GGUF, started and measured; None (and why, printed) if it cannot."""
    from solutions.system.loading.weights import find_gguf
    from solutions.system.serving.server import MODEL_ID

    missing = [
        m
        for m in ("llama_cpp", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        why = (
            "llama-cpp-python is not installed"
            if "llama_cpp" in missing
            else f"llama-cpp-python is installed without its server's packages ({', '.join(missing)})"
        )
        print(
            f"  llama.cpp: {why}, so no llama.cpp server runs beside ours "
            "(`pip install 'llama-cpp-python[server]'`, or `make bench-peers`)"
        )
        return None
    port = free_port()
    # --n_batch 1 only where the CPU lists AMX: its batched prompt path uses AMX tiles then, and a VM
    # that lists AMX without the kernel enabling it (one of ours) killed the server on its first
    # request ("invalid opcode" in libggml-cpu); elsewhere it prefills in its default batches, so the
    # long prompt's time to first token is its real one.
    # --interrupt_requests False: it serves one request at a time, and by default a new request
    # cuts off the one streaming (the client sees an incomplete chunked read); this queues them.
    peer = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(find_gguf()),
        "--port",
        str(port),
        "--n_ctx",
        "8192",
        "--chat_format",
        "chatml",
        "--model_alias",
        MODEL_ID,
        "--interrupt_requests",
        "False",
    ]
    if cpu_lists_amx():
        peer += ["--n_batch", "1"]
        print(
            "  llama.cpp: this CPU lists AMX, so its prompts go in a token at a time (--n_batch 1)",
            flush=True,
        )
    peer += ["--n_threads", str(args.threads)] if args.threads else []
    try:
        return measure_server("llama.cpp", peer, f"http://127.0.0.1:{port}", MODEL_ID, args)
    except Exception as exc:  # noqa: BLE001 - the peer is another program: whatever it does, ours stay measured
        print(
            f"  llama.cpp: its server did not run or answer ({type(exc).__name__}: {exc}); "
            "the table shows ours alone"
        )
        return None


DESCRIPTION = f"""\
Load-test an OpenAI-compatible server: at each concurrency level, that many clients send streamed
greedy chat requests back to back for --seconds (requests in flight then finish).

It starts its own `dojo serve` in a process of its own (--weights, --threads set it), and with --peers
llama.cpp's server on the same GGUF beside it (llama-cpp-python[server]: `make bench-peers`). With
--url it starts none and measures the server already running there, after checking that it answers
GET /v1/models or a chat completion.

It prints a table per server and level: requests, output tokens/s, the ratio to 1 client,
and TTFT and TPOT p50 / p99 in ms. A percentile needs samples (a request is one):
p50 {MIN_SAMPLES[50]}, p99 {MIN_SAMPLES[99]}. From fewer the table shows "n/a (k)", k the samples it had,
and the plot leaves the point out; a longer --seconds gives more. The plot goes to
bench/serve.png under the workspace ($DOJO_WORKSPACE, default workspace/; the path
is printed), and --json FILE writes every level and request there too.

Then each server answers --long-prompts prompts of about 2,000 tokens, one at a time (one token
of answer each, none sharing a first block): the median time to that token.

The goal: at {GOAL_CLIENTS} clients, at least {GOAL_RATIO:g}x the tokens/s of 1 client.
With --peers, beside llama.cpp's server: at 1 client at least {PEER_RATE:g}x its tokens/s, and the
long prompt's time to first token at most {PEER_TTFT:g}x its.
It prints met or not met for each, and the plot draws the first goal's line."""


def register(what, int_list) -> None:
    """Add `serve` to `dojo bench`'s subcommands; `int_list` parses a comma-separated option."""
    p = what.add_parser(
        "serve",
        help="load-test `dojo serve`: tokens/s, TTFT and TPOT against concurrency",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--concurrency",
        type=int_list,
        default=[1, 2, 4, 8, 16],
        help="concurrent clients per level, comma-separated (default 1,2,4,8,16)",
    )
    p.add_argument(
        "--seconds", type=float, default=15.0, help="seconds clients keep asking per level (default 15)"
    )
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens of each request (default 64)")
    p.add_argument(
        "--long-prompts",
        type=int,
        default=3,
        metavar="N",
        help="long prompts (about 2,000 tokens) each server answers one at a time; 0 skips them (default 3)",
    )
    p.add_argument(
        "--weights", default=None, metavar="MODE", help="the server's weights mode (default: dojo serve's)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="the servers' threads (default: their own choice)",
    )
    p.add_argument(
        "--peers",
        action="store_true",
        help="also start llama.cpp's server (llama-cpp-python) on the same GGUF and measure it beside ours",
    )
    p.add_argument(
        "--url",
        default=None,
        metavar="URL",
        help="measure the server already running at URL (e.g. http://127.0.0.1:8000) and start none",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write every level (percentiles null from too few samples) and request here",
    )
    p.set_defaults(func=run)
