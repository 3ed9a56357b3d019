"""`dojo bench serve`: a load generator against `dojo serve` (and llama.cpp's server, where installed).

At each concurrency level, that many clients send streamed chat completions back to back for a fixed
time. Per request it records TTFT and TPOT; per level, output tokens/s and TTFT and TPOT p50 / p99, in a
table and a plot (bench/serve.png under the workspace). Each server runs as its own process, so the
load generator never shares an interpreter with the server it measures.
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
from dataclasses import dataclass
from pathlib import Path

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


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between ranks; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    rank = (len(xs) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (xs[high] - xs[low]) * (rank - low)


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
    """`concurrency` clients asking back to back for `seconds`; requests in flight then finish."""
    import httpx

    samples: list[Sample] = []
    errors, first_error = 0, ""
    start = time.perf_counter()

    async def client_loop(worker: int, client) -> None:
        nonlocal errors, first_error
        n = worker
        while time.perf_counter() - start < seconds:
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


def measure_server(name: str, command: list[str], url: str | None, model: str, args, env=None) -> list[Level]:
    """Start a server, warm it with one request, then run every concurrency level against it."""
    with ServerProcess(command, url, env=env) as base:
        asyncio.run(one_request_with_client(base, model))
        levels = []
        for c in args.concurrency:
            level = asyncio.run(run_level(base, model, c, args.seconds, args.max_tokens))
            print(
                f"  {name}: concurrency {c:>2}: {len(level.samples)} requests, "
                f"{level.tokens_per_s:.1f} tokens/s"
                + (f", {level.errors} errors (the first: {level.first_error})" if level.errors else ""),
                flush=True,
            )
            levels.append(level)
    return levels


async def one_request_with_client(url: str, model: str) -> Sample:
    import httpx

    async with httpx.AsyncClient(timeout=300.0) as client:
        return await one_request(client, url, model, QUESTIONS[0], 8)


# --------------------------------------------------------------------------- the report


def table(results: dict[str, list[Level]]) -> list[str]:
    """One row per server and level: requests, tokens/s, x its concurrency 1, TTFT and TPOT p50 / p99."""
    lines = [
        f"  {'server':<10}{'conc':>5}{'reqs':>6}{'tok/s':>9}{'x c=1':>7}{'TTFT p50':>10}{'p99':>8}"
        f"{'TPOT p50':>10}{'p99':>8}   (ms)"
    ]
    for name, levels in results.items():
        base = next((lv.tokens_per_s for lv in levels if lv.concurrency == 1), None)
        for lv in levels:
            ttft = [s.ttft * 1e3 for s in lv.samples]
            tpot = [s.tpot * 1e3 for s in lv.samples if s.tpot is not None]
            cells = [percentile(ttft, 50), percentile(ttft, 99), percentile(tpot, 50), percentile(tpot, 99)]
            ratio = f"{lv.tokens_per_s / base:.2f}" if base else "-"
            lines.append(
                f"  {name:<10}{lv.concurrency:>5}{len(lv.samples):>6}{lv.tokens_per_s:>9.1f}{ratio:>7}"
                + "".join(f"{'-' if v is None else f'{v:.0f}':>{w}}" for v, w in zip(cells, (10, 8, 10, 8)))
                + (f"   {lv.errors} errors" if lv.errors else "")
            )
    return lines


def plot(results: dict[str, list[Level]], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), dpi=100)
    axes = fig.subplots(1, 3)
    for name, levels in results.items():
        xs = [lv.concurrency for lv in levels]
        axes[0].plot(xs, [lv.tokens_per_s for lv in levels], "o-", label=name)
        for ax, key in ((axes[1], "ttft"), (axes[2], "tpot")):
            for q, style in ((50, "o-"), (99, "x--")):
                ys = [
                    percentile([getattr(s, key) * 1e3 for s in lv.samples if getattr(s, key) is not None], q)
                    for lv in levels
                ]
                ax.plot(xs, [float("nan") if y is None else y for y in ys], style, label=f"{name} p{q}")
    for ax, ylabel, title in (
        (axes[0], "output tokens/s", "throughput"),
        (axes[1], "ms", "time to first token"),
        (axes[2], "ms", "time per output token"),
    ):
        xs = sorted({lv.concurrency for levels in results.values() for lv in levels})
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    return path


def run(args: argparse.Namespace) -> int:
    from dojo.targets import workspace_dir
    from solutions.system.loading.weights import find_gguf
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
    else:
        port = free_port()
        # --n_batch 1: prompts go in a token at a time. Its batched path uses AMX tiles where the CPU
        # lists them, and a VM that lists AMX without the kernel enabling it (one of ours) kills the
        # server on its first request ("invalid opcode" in libggml-cpu); decode is one token anyway.
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
            "--n_batch",
            "1",
            "--interrupt_requests",
            "False",
        ]
        peer += ["--n_threads", str(args.threads)] if args.threads else []
        try:
            results["llama.cpp"] = measure_server(
                "llama.cpp", peer, f"http://127.0.0.1:{port}", MODEL_ID, args
            )
        except Exception as exc:  # noqa: BLE001 - the peer is another program: whatever it does, ours stay measured
            print(
                f"  llama.cpp: its server did not run or answer ({type(exc).__name__}: {exc}); "
                "the table shows ours alone"
            )
    print("\n".join(table(results)))
    ours_levels = {lv.concurrency: lv.tokens_per_s for lv in results["dojo"]}
    if 1 in ours_levels and 8 in ours_levels and ours_levels[1] > 0:
        ratio = ours_levels[8] / ours_levels[1]
        print(
            f"  goal: at concurrency 8, at least 3x the tokens/s of concurrency 1: {ratio:.2f}x "
            f"({'met' if ratio >= 3 else 'not met'})"
        )
    folder = workspace_dir() / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"  plot: {plot(results, folder / 'serve.png')}")
    return 0


def register(what, int_list) -> None:
    """Add `serve` to `dojo bench`'s subcommands; `int_list` parses a comma-separated option."""
    p = what.add_parser("serve", help="load-test `dojo serve`: tokens/s, TTFT and TPOT against concurrency")
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
        "--weights", default=None, metavar="MODE", help="the server's weights mode (default: dojo serve's)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="the servers' threads (default: their own choice)",
    )
    p.set_defaults(func=run)
