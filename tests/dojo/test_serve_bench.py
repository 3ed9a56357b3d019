"""`dojo bench serve`'s load generator against a fake OpenAI server (no model): what it counts and times.

The fake streams a role chunk, then five one-token text chunks 20 ms apart after a 50 ms wait, then
a usage chunk: each request must be timed with TTFT >= 50 ms and its last token >= 130 ms after
sending, count the usage's tokens, and each level must run its clients for its time and report its tokens per second.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from dojo.tools import serve_bench
from solutions.system.serving.server import running

TOKENS, FIRST_S, GAP_S = 5, 0.05, 0.02


def fake_app() -> Starlette:
    async def chat(request):
        body = await request.json()

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

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


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
    assert len(lines) == 3
    assert lines[2].split()[:5] == ["dojo", "8", "8", "80.0", "8.00"], lines[2]
