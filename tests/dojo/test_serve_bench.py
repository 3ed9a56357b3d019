"""`dojo bench serve`'s load generator against a fake OpenAI server (no model): what it counts and times.

The fake streams a role chunk, then five one-token text chunks 20 ms apart after a 50 ms wait, then
a usage chunk: each request must be timed with TTFT >= 50 ms and its last token >= 130 ms after
sending, count the usage's tokens, and each level must run its clients for its time and report its tokens per second.
Percentiles come only from enough samples, plots from 0 with the goal; --url measures the fake.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from dojo import cli
from dojo.errors import UsageError
from dojo.tools import serve_bench
from solutions.system.serving.server import MODEL_ID, running

TOKENS, FIRST_S, GAP_S = 5, 0.05, 0.02


def fake_app(models: bool = True, asked: list | None = None) -> Starlette:
    """The fake; `models`: it lists "fake-model" at GET /v1/models; `asked` collects the models asked for."""

    async def chat(request):
        body = await request.json()
        if asked is not None:
            asked.append(body["model"])

        if not body.get("stream"):  # a long prompt: one token, its usage counting a token per 5 characters
            await asyncio.sleep(FIRST_S)
            prompt = len(body["messages"][0]["content"]) // 5
            usage = {"completion_tokens": 1, "prompt_tokens": prompt, "total_tokens": prompt + 1}
            message = {"role": "assistant", "content": "t"}
            return JSONResponse({"choices": [{"index": 0, "message": message}], "usage": usage})

        async def events():
            yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'role': 'assistant'}}]})}\n\n"
            await asyncio.sleep(FIRST_S)
            for i in range(TOKENS):
                if i:
                    await asyncio.sleep(GAP_S)
                yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': f't{i}'}}]})}\n\n"
            usage = {"completion_tokens": TOKENS, "prompt_tokens": 3, "total_tokens": TOKENS + 3}
            if body.get("stream_options", {}).get("include_usage"):
                yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def list_models(request):
        return JSONResponse({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    routes = [Route("/v1/chat/completions", chat, methods=["POST"])]
    return Starlette(routes=routes + ([Route("/v1/models", list_models)] if models else []))


def parse(*argv: str):
    """`dojo bench serve ARGV`'s parsed options."""
    return cli.build_parser(builtins=False, plugins=("dojo.tools.bench",)).parse_args(
        ["bench", "serve", *argv]
    )


def levels_of(*counts: int, ttft: float = 1.0) -> list:
    """A level per count (concurrency 1, 8, ...) with that many one-second requests of 10 tokens."""
    return [
        serve_bench.Level(c, [serve_bench.Sample(ttft, 0.5, 10)] * n, 1.0, 0)
        for c, n in zip((1, 8, 16), counts)
    ]


@pytest.mark.parametrize(
    "values, q, want",
    [
        ([3.0], 99, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
        ([1.0, 2.0], 0, 1.0),
        ([], 50, None),
    ],
)
def test_percentile_interpolates_between_ranks(values, q, want):
    """The q-th percentile interpolates linearly between the sorted values' ranks; None for none."""
    assert serve_bench.percentile(values, q) == want


def test_a_level_times_and_counts_each_request():
    """Two clients for 0.3 s: every request timed (TTFT >= the server's wait, TPOT >= its gap), tokens
    from the usage chunk, tokens/s = all tokens over the level's wall time."""
    with running(fake_app()) as url:
        level = asyncio.run(serve_bench.run_level(url, "fake", 2, 0.3, 8))
    assert level.errors == 0 and len(level.samples) >= 2
    for s in level.samples:  # chunks may bunch up on a busy machine; the last cannot come early
        assert s.tokens == TOKENS and s.ttft >= FIRST_S, s
        assert s.ttft + s.tpot * (TOKENS - 1) >= FIRST_S + GAP_S * (TOKENS - 1) - 1e-3, s
    assert level.seconds >= 0.3
    assert level.tokens_per_s == pytest.approx(TOKENS * len(level.samples) / level.seconds)


def test_the_table_names_each_level_and_its_ratio():
    """The table has a row per level with its requests, tokens/s and the ratio to concurrency 1."""
    levels = [serve_bench.Level(c, [serve_bench.Sample(0.1, 0.01, 10)] * c, 1.0, 0) for c in (1, 8)]
    lines = serve_bench.table({"dojo": levels})
    assert len(lines) == 4  # the header, two levels, the line on too few samples
    assert lines[2].split()[:5] == ["dojo", "8", "8", "80.0", "8.00"], lines[2]


@pytest.mark.parametrize("q, enough", [(50, 6), (99, 100)])
def test_a_percentile_needs_enough_samples(q, enough):
    """p50 is reported from 6 samples and p99 from 100; from one fewer, None."""
    values = [float(i) for i in range(enough)]
    assert serve_bench.reported(values[:-1], q) is None
    assert serve_bench.reported(values, q) == serve_bench.percentile(values, q)


def test_the_table_says_n_a_for_too_few_samples():
    """At 4 requests every percentile reads "n/a (4)"; at 100 each is a number; a line says what n/a means."""
    lines = serve_bench.table({"dojo": levels_of(4, 100)})
    assert lines[1].split()[5:] == ["n/a", "(4)"] * 4, lines[1]
    assert lines[2].split()[5:] == ["1000", "1000", "500", "500"], lines[2]
    assert "p50 needs 6, p99 100" in lines[3], lines[3]


def test_the_plot_starts_at_zero_and_draws_the_goal():
    """Every panel's y-axis starts at 0; the throughput panel has the goal line at 3x 1 client's tokens/s."""
    fig = serve_bench.figure({"dojo": levels_of(100, 400)})  # 1000 and 4000 tokens/s, TTFT 1000 ms
    assert [ax.get_ylim()[0] for ax in fig.axes] == [0, 0, 0]
    goal = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("goal")]
    assert len(goal) == 1 and list(goal[0].get_ydata()) == [3000.0, 3000.0], goal


def test_the_plot_leaves_out_percentiles_from_too_few_samples():
    """With 4 requests, the p99 lines have no point to draw."""
    fig = serve_bench.figure({"dojo": levels_of(4, 4)})
    p99 = [line for ax in fig.axes[1:] for line in ax.get_lines() if line.get_label().endswith("p99")]
    assert len(p99) == 2 and all(y != y for line in p99 for y in line.get_ydata()), p99  # NaN: not drawn


def test_url_measures_the_running_server_and_starts_none(tmp_path, monkeypatch):
    """--url: no process started; the model /v1/models lists is asked for; the plot and --json written."""
    monkeypatch.setenv("DOJO_WORKSPACE", str(tmp_path))
    monkeypatch.setattr(
        serve_bench.subprocess, "Popen", lambda *a, **k: pytest.fail("--url started a server")
    )
    asked: list = []
    with running(fake_app(asked=asked)) as url:
        args = parse(
            "--url",
            f"{url}/v1/",
            "--concurrency",
            "1",
            "--seconds",
            "0.2",
            "--json",
            str(tmp_path / "r.json"),
        )
        assert serve_bench.run(args) == 0
    assert asked and set(asked) == {"fake-model"}, asked
    assert (tmp_path / "bench" / "serve.png").stat().st_size > 0
    report = json.loads((tmp_path / "r.json").read_text())
    level = report["servers"]["server"][0]
    assert level["concurrency"] == 1 and level["requests"] == len(level["samples"]) >= 1, level
    assert level["ttft_p99_ms"] is None, level  # far fewer than 100 requests
    long = report["long_prompt"]["server"]
    assert len(long["ttft_ms"]) == 3 and min(long["ttft_ms"]) >= FIRST_S * 1e3, (
        long
    )  # --long-prompts' default
    assert long["prompt_tokens"] == [len(serve_bench.long_prompt(t)) // 5 for t in range(3)], long
    assert report["peer_ratios"] == {}, "no llama.cpp ran: no ratios to it"


def test_url_falls_back_to_a_chat_completion():
    """A server without GET /v1/models that answers a chat completion is asked for dojo serve's model."""
    with running(fake_app(models=False)) as url:
        assert serve_bench.probe(url) == MODEL_ID


def test_url_with_nothing_there_is_a_clear_error():
    """Nothing listening at --url: a ValueError naming the address and both requests tried."""
    with running(fake_app()) as url:
        pass  # the port is free again
    with pytest.raises(
        ValueError, match="no OpenAI-compatible server answers at .*/v1/models.*/v1/chat/completions"
    ):
        serve_bench.probe(url)


@pytest.mark.parametrize("argv", [["--url", "localhost:8000"], ["--url", "http://x", "--weights", "fp32"]])
def test_url_misused_is_a_usage_error(argv):
    """--url wants http(s)://HOST, and goes with none of the options that set a started server."""
    with pytest.raises(UsageError, match="--url"):
        serve_bench.run(parse(*argv))


@pytest.mark.parametrize("peers", [False, True])
def test_llama_cpp_runs_only_with_peers(monkeypatch, peers):
    """Without --peers only `dojo serve` is started; with it, llama.cpp's server is measured too."""
    started = []
    monkeypatch.setattr(
        serve_bench, "measure_server", lambda name, *a, **k: started.append(name) or ([], None)
    )
    monkeypatch.setattr(serve_bench, "measure_peer", lambda args: started.append("llama.cpp") or ([], None))
    results = serve_bench.measure_started(parse(*(["--peers"] if peers else [])))
    assert started == ["dojo"] + ["llama.cpp"] * peers and list(results) == started, started


def test_help_says_what_it_starts_where_it_writes_and_the_goal(capsys):
    """--help names both servers, --url, the plot's path, --json, the sample minimums and the goal."""
    with pytest.raises(SystemExit):
        parse("--help")
    text = " ".join(capsys.readouterr().out.split())
    for phrase in (
        "its own `dojo serve`",
        "with --peers llama.cpp's server",
        "With --url it starts none",
        "bench/serve.png under the workspace",
        "--json FILE writes",
        "p50 6, p99 100",
        'the table shows "n/a (k)"',
        "at 8 clients, at least 3x the tokens/s of 1 client",
        "at 1 client at least 1x its tokens/s",
        "time to first token at most 1.5x its",
        "prompts of about 2,000 tokens",
    ):
        assert phrase in text, phrase


def test_long_prompts_are_about_2000_tokens_and_share_no_first_block():
    """SmolLM2's tokenizer counts 1,800-2,200 tokens in each long prompt, and two differ in their first
    16 tokens (a prefix cache's block), so no server answers one from another's cached keys."""
    from solutions.system.loading.tokenizer import load_tokenizer

    tok = load_tokenizer()
    a, b = (tok.encode(serve_bench.long_prompt(tag)) for tag in (0, 1))
    assert 1800 <= len(a) <= 2200, len(a)
    assert a[:16] != b[:16]


def test_peer_goals_compare_ours_with_llama_cpp():
    """At 1 client 2x llama.cpp's tokens/s (met), a long prompt 2x its time to first token (not met,
    the limit is 1.5x); without llama.cpp, no peer goal is printed."""
    ours, peer = levels_of(20), levels_of(10)
    longs = {
        "dojo": serve_bench.LongPrompt([2.0, 2.0, 4.0], [2000] * 3),
        "llama.cpp": serve_bench.LongPrompt([1.0], [2010]),
    }
    lines = serve_bench.peer_goals({"dojo": ours, "llama.cpp": peer}, longs)
    assert lines == [
        "  goal: at 1 client, at least 1x llama.cpp's tokens/s: 2.00x (met)",
        "  goal: a long prompt's time to first token at most 1.5x llama.cpp's: 2.00x (not met)",
    ], lines
    assert serve_bench.peer_goals({"dojo": ours}, longs) == []
    unmeasured = serve_bench.peer_goals({"dojo": ours, "llama.cpp": peer}, {})
    assert unmeasured[1].endswith("not measured"), unmeasured


def test_long_prompts_below_zero_is_a_usage_error():
    with pytest.raises(UsageError, match="--long-prompts"):
        serve_bench.run(parse("--long-prompts", "-1"))
