"""`dojo serve` on SmolLM2: the official `openai` client and curl against the real server.

One engine and one server (uvicorn on an ephemeral port of 127.0.0.1, always shut down) serve the
whole module, on the session's fp32 model. Greedy answers equal what `dojo demo` prints for the same
question, streamed chunks arrive in order and add up to it, concurrent clients each get their own,
stop strings, logprobs and penalties work through the client, bad requests get OpenAI's error shape
with a 4xx, and a client that disconnects mid-stream frees its cache. Few new tokens each.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import threading
import time
from types import SimpleNamespace

import httpx
import openai
import pytest
import torch

from solutions.generate import generate
from solutions.system.serving.engine import Engine
from solutions.system.serving.server import MODEL_ID, REQUEST_LOG, Answer, bind, build_app, running

NEW = 12  # new tokens per request: enough to tell answers apart


@pytest.fixture(scope="module")
def server(smollm2, smollm2_tokenizer):
    engine = Engine(smollm2, smollm2_tokenizer.eos_token_id)
    engine.start()
    try:
        with running(build_app(engine, smollm2_tokenizer)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
            yield SimpleNamespace(url=url, engine=engine, client=client)
    finally:
        engine.close()


@pytest.fixture(scope="module")
def demo_answer(smollm2, smollm2_tokenizer):
    """What `dojo demo` answers (greedy, its chat template and the reference generate): token ids."""

    def answer(question: str, max_new_tokens: int = NEW) -> list[int]:
        tok = smollm2_tokenizer
        prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
        with torch.inference_mode():
            result = generate(smollm2, [prompt], max_new_tokens=max_new_tokens, eos_token_id=tok.eos_token_id)
        return result.tokens[0]

    return answer


def text_of(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode([t for t in ids if t != tokenizer.eos_token_id])


def chat(server, question: str, **kwargs):
    """The server's chat answer to `question`: greedy and NEW tokens unless kwargs say otherwise."""
    kwargs = {"max_tokens": NEW, "temperature": 0} | kwargs
    return server.client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": question}], **kwargs
    )


def wait_idle(engine, seconds: float = 20.0):
    """The engine's stats once nothing runs or waits (or after `seconds`)."""
    deadline = time.monotonic() + seconds
    while (stats := engine.stats()).pending:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return stats


def test_models_and_health_list_the_model(server):
    """/v1/models lists the served model's id, and /health answers ok."""
    assert [m.id for m in server.client.models.list().data] == [MODEL_ID]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_greedy_chat_equals_the_demo(server, demo_answer, smollm2_tokenizer):
    """A greedy chat completion is `dojo demo`'s answer to the same question, with usage counted."""
    question = "What is the capital of France?"
    want = demo_answer(question)
    got = chat(server, question)
    assert got.choices[0].message.content == text_of(smollm2_tokenizer, want), (
        f"greedy answer to {question!r} differs from dojo demo's"
    )
    assert got.choices[0].finish_reason == (
        "stop" if want[-1] == smollm2_tokenizer.eos_token_id else "length"
    )
    assert got.usage.completion_tokens == len(want)


def test_stream_chunks_arrive_in_order(server, demo_answer, smollm2_tokenizer):
    """Streamed chunks: the role first, then the answer's text pieces in order, then a finish reason
    and the usage; one id throughout."""
    question = "Name three colors."
    want = demo_answer(question)
    pieces = Answer(smollm2_tokenizer.token_bytes(), smollm2_tokenizer.eos_token_id, [], logprobs=False)
    want_pieces = [p for t in want if (p := pieces.add(t))]
    chunks = list(chat(server, question, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    got_pieces = [c.choices[0].delta.content for c in chunks[1:] if c.choices and c.choices[0].delta.content]
    assert got_pieces == want_pieces, "the streamed pieces are not the answer's pieces in order"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].usage.completion_tokens == len(want)
    assert len({c.id for c in chunks}) == 1, "chunks of one answer carry different ids"


def test_curl_streams_server_sent_events(server, smollm2_tokenizer):
    """curl -N on /v1/completions: `data:` events whose text adds up to the non-streamed answer, then [DONE]."""
    body = {"model": MODEL_ID, "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    whole = server.client.completions.create(**body).choices[0].text
    out = subprocess.run(
        [
            "curl",
            "-sN",
            "--max-time",
            "60",
            f"{server.url}/v1/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps(body | {"stream": True}),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    events = [line.removeprefix("data: ") for line in out.stdout.splitlines() if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", f"the stream does not end with [DONE]: {out.stdout[-300:]!r}"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == whole


def test_concurrent_clients_each_get_their_own_answer(server, demo_answer, smollm2_tokenizer):
    """Four clients at once, four questions: each gets its own greedy answer, decoded in one batch."""
    questions = ["What is 2 + 2?", "Name a fruit.", "What is the capital of Italy?", "Say hello."]
    answers: dict[int, str] = {}
    start = threading.Barrier(len(questions))

    def ask(i: int) -> None:
        start.wait()
        answers[i] = chat(server, questions[i]).choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(questions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i, q in enumerate(questions):
        assert answers.get(i) == text_of(smollm2_tokenizer, demo_answer(q)), (
            f"client {i} ({q!r}) did not get its own greedy answer"
        )
    assert server.engine.stats().max_batch_seen > 1, "concurrent requests never shared a decode step"


def test_seeded_sampling_repeats(server):
    """Sampling with a seed gives the same text twice."""
    first, second = (
        chat(server, "Tell me a story.", temperature=1.0, seed=7).choices[0].message.content for _ in range(2)
    )
    assert first == second


@pytest.mark.parametrize(
    "case",
    [
        "unknown model",
        "max_tokens over the context",
        "malformed JSON",
        "prompt over the context",
        "too many choices",
    ],
)
def test_bad_requests_get_openai_errors(server, case):
    """Each bad request gets a 4xx with OpenAI's error shape and a message naming the problem."""
    context = server.engine.context
    ok = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    path, body, status, words = {
        "unknown model": ("chat/completions", ok | {"model": "gpt-4"}, 404, "gpt-4"),
        "max_tokens over the context": (
            "chat/completions",
            ok | {"max_tokens": context + 1},
            400,
            "context length",
        ),
        "malformed JSON": ("chat/completions", '{"model": ', 400, "JSON"),
        "prompt over the context": (
            "completions",
            {"model": MODEL_ID, "prompt": [1] * (context + 1)},
            400,
            "context length",
        ),
        "too many choices": ("chat/completions", ok | {"n": 9}, 400, "[1, 8]"),
    }[case]
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(f"{server.url}/v1/{path}", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == status, f"{case}: status {r.status_code}, want {status}"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and words in error["message"], error


def test_the_openai_client_raises_on_an_unknown_model(server):
    """The official client turns the 404 into NotFoundError, with our message."""
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        server.client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "Hi"}])


def test_a_client_that_disconnects_frees_its_cache(server):
    """Closing a stream after two chunks cancels the request: the engine holds nothing soon after."""
    wait_idle(server.engine)
    steps = server.engine.stats().steps
    body = {
        "model": MODEL_ID,
        "prompt": "Once upon a time",
        "max_tokens": 2000,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        events = 0
        for line in r.iter_lines():
            events += line.startswith("data: ")
            if events == 2:
                break
    stats = wait_idle(server.engine)
    assert stats.pending == 0 and stats.blocks_in_use == 0, f"after the client left: {stats}"
    assert stats.steps - steps < 1000, "the engine decoded on long after the client left"


def test_each_request_logs_one_line_with_status_and_time(caplog):
    """every request, a 404 or 400 included, logs one line at info: method, path, status and milliseconds"""
    from starlette.testclient import TestClient

    engine = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(vocab_size=8)))  # unused by these
    app = build_app(engine, SimpleNamespace(eos_token_id=2))
    caplog.set_level(logging.INFO, logger=REQUEST_LOG.name)
    with TestClient(app) as client:
        client.get("/health")
        client.get("/v1/nowhere")
        client.post("/v1/chat/completions", content=b"not json")
    lines = [r.getMessage() for r in caplog.records if r.name == REQUEST_LOG.name]
    assert [line.rsplit(" ", 2)[0] for line in lines] == [
        "GET /health 200",
        "GET /v1/nowhere 404",
        "POST /v1/chat/completions 400",
    ], lines
    assert all(re.fullmatch(r".* \d+\.\d ms", line) for line in lines), lines
    assert {r.levelno for r in caplog.records if r.name == REQUEST_LOG.name} == {logging.INFO}


def test_dojo_serve_logs_requests_at_its_log_level():
    """`dojo serve --log-level` sets the request lines' level: info shows them, warning hides them"""
    import logging.config

    from dojo.tools.serve import log_config

    try:
        for level, shown in (("info", True), ("warning", False)):
            logging.config.dictConfig(log_config(level))
            assert REQUEST_LOG.isEnabledFor(logging.INFO) == shown, level
            assert REQUEST_LOG.handlers and not REQUEST_LOG.propagate
    finally:
        REQUEST_LOG.handlers.clear()
        REQUEST_LOG.setLevel(logging.NOTSET)
        REQUEST_LOG.propagate = True


# ---- the parameters existing tools send ----------------------------------------------------------


def test_explicit_defaults_and_nulls_are_accepted(server):
    """what frameworks send on every call (logprobs false, top_logprobs 0, n 1, zero penalties, nulls,
    response_format text) changes nothing: the answer is the plain greedy one"""
    plain = chat(server, "Name a colour.").choices[0].message.content
    got = chat(
        server,
        "Name a colour.",
        logprobs=False,
        top_logprobs=0,
        n=1,
        presence_penalty=0.0,
        frequency_penalty=0,
        stop=None,
        logit_bias={},
        response_format={"type": "text"},
        seed=None,
    ).choices[0]
    assert got.message.content == plain, f"explicit defaults changed the answer: {got.message.content!r}"


def test_n_choices_through_the_openai_client(server, demo_answer, smollm2_tokenizer):
    """n = 2 greedy: two choices, each the demo's answer, the prompt counted once in usage"""
    question = "What is the capital of France?"
    want = text_of(smollm2_tokenizer, demo_answer(question))
    got = chat(server, question, n=2)
    assert [c.index for c in got.choices] == [0, 1]
    assert [c.message.content for c in got.choices] == [want, want]
    assert got.usage.prompt_tokens == chat(server, question).usage.prompt_tokens


def test_stop_logprobs_and_penalties_through_the_openai_client(server, smollm2_tokenizer):
    """stop ends the greedy "Hi" answer before "assist" (finish_reason stop); logprobs list each token up
    to the one holding the stop string, with 2 alternatives, the greedy token its own best; a presence
    penalty is accepted and answers"""
    got = chat(server, "Hi", stop=["assist"], logprobs=True, top_logprobs=2).choices[0]
    assert (got.message.content, got.finish_reason) == ("Hello! How can I ", "stop"), got
    entries = got.logprobs.content
    assert "".join(e.token for e in entries) == "Hello! How can I assist", entries
    assert all(len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token for e in entries), entries
    penalised = chat(server, "List three colours.", presence_penalty=1.0, frequency_penalty=0.5)
    assert penalised.choices[0].message.content, "a penalised request answered nothing"


def test_developer_role_reads_as_system_and_refusal_is_null(server):
    """a developer message is the system message by another name; every chat message carries refusal"""

    def ask(role):
        return server.client.chat.completions.create(
            model=MODEL_ID,
            messages=[{"role": role, "content": "Answer in French."}, {"role": "user", "content": "Hi"}],
            max_tokens=NEW,
            temperature=0,
        )

    developer, system = ask("developer"), ask("system")
    assert developer.choices[0].message.content == system.choices[0].message.content
    raw = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        timeout=60,
    ).json()
    message = raw["choices"][0]["message"]
    assert "refusal" in message and message["refusal"] is None, message


def offline_app():
    """The app on an engine and tokenizer that are never reached: requests refused before generation."""
    engine = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(vocab_size=8)))
    return build_app(engine, SimpleNamespace(eos_token_id=2))


@pytest.mark.parametrize(
    "extra, param, words",
    [
        ({"response_format": {"type": "json_object"}}, "response_format", "json_object is not supported"),
        ({"response_format": {"type": "json_schema", "json_schema": {}}}, "response_format", "json_schema"),
        ({"response_format": "json"}, "response_format", "must be an object"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "tool (function) calling"),
        ({"tool_choice": "auto"}, "tool_choice", "tool (function) calling"),
    ],
)
def test_parameters_it_cannot_honour_are_refused_by_name(extra, param, words):
    """a parameter the server would otherwise ignore gets a 400 naming it, never a silent plain answer"""
    from starlette.testclient import TestClient

    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}]} | extra
    with TestClient(offline_app()) as client:
        r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, f"{extra}: status {r.status_code}, want 400"
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_connections_send_each_write_at_once():
    """the server's connections have Nagle's algorithm off (TCP_NODELAY): with it on, a streamed
    token on a kept-alive connection waited for the client's delayed ACK (40 ms on Linux)"""
    with bind("127.0.0.1", 0) as listener:
        assert listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), (
            "the listening socket has Nagle on"
        )
        with socket.create_connection(listener.getsockname()[:2]):
            conn, _ = listener.accept()
            with conn:
                assert conn.proto == socket.IPPROTO_TCP, "asyncio sets TCP_NODELAY only where proto is TCP"
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), (
                    "an accepted connection has Nagle on: each streamed chunk can wait 40 ms"
                )


def test_a_body_past_the_limit_gets_413():
    """a request body over the size limit is refused with 413 and OpenAI's error shape, unread"""
    from starlette.testclient import TestClient

    from solutions.system.serving.server import MAX_BODY

    big = json.dumps({"model": MODEL_ID, "prompt": "a" * (MAX_BODY + 10)})
    with TestClient(offline_app()) as client:
        r = client.post("/v1/completions", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, f"status {r.status_code}, want 413"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and "at most" in error["message"], error


def test_a_repeated_prompt_is_served_from_the_prefix_cache(server, smollm2_tokenizer):
    """The same long system prompt twice: the second request reports every whole block but the last
    token's as usage.prompt_tokens_details.cached_tokens, and answers exactly as the first"""
    system = " ".join(
        f"Rule {i}: answer in plain words and never guess a number you do not know." for i in range(12)
    )
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Name a primary colour."}]
    tok = smollm2_tokenizer
    n = len(tok.encode(tok.apply_chat_template(messages)))
    answers = [
        server.client.chat.completions.create(
            model=MODEL_ID, messages=messages, max_tokens=NEW, temperature=0
        )
        for _ in range(2)
    ]
    first, second = (a.usage.prompt_tokens_details.cached_tokens for a in answers)
    block = server.engine.config.block_size
    assert answers[0].usage.prompt_tokens == n > 150
    assert second == (n - 1) // block * block and first < second, (
        f"cached tokens {first} then {second} of a {n}-token prompt in blocks of {block}"
    )
    assert answers[1].choices[0].message.content == answers[0].choices[0].message.content


def test_two_api_keys_never_share_cached_blocks(server):
    """the same long prompt under key a, then key b, then key a again: only the repeat under a reports
    cached tokens (every whole block but the last token's); a prompt_cache_key is a namespace of its own
    under the same key; every answer is the same"""
    system = " ".join(
        f"Policy {i}: keep every reply short, kind and free of made-up facts." for i in range(12)
    )
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Name a planet."}]

    def ask(key: str, **extra):
        client = server.client.with_options(api_key=key)
        return client.chat.completions.create(
            model=MODEL_ID, messages=messages, max_tokens=NEW, temperature=0, **extra
        )

    answers = [
        ask("tenant-a"),
        ask("tenant-b"),
        ask("tenant-a"),
        ask("tenant-a", extra_body={"prompt_cache_key": "app-1"}),
    ]
    cached = [a.usage.prompt_tokens_details.cached_tokens for a in answers]
    n, block = answers[0].usage.prompt_tokens, server.engine.config.block_size
    assert cached == [0, 0, (n - 1) // block * block, 0] and n > 150, (
        f"cached tokens under keys a, b, a, a with a prompt_cache_key: {cached} ({n}-token prompt)"
    )
    contents = [a.choices[0].message.content for a in answers]
    assert contents == [contents[0]] * 4, f"a tenant's salt changed the answer: {contents}"


@pytest.mark.parametrize("name", ["prompt_cache_key", "user", "safety_identifier"])
def test_tenant_fields_that_are_not_strings_are_refused(name):
    """prompt_cache_key, user and safety_identifier must be strings: anything else is a 400 naming it"""
    from starlette.testclient import TestClient

    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], name: 42}
    with TestClient(offline_app()) as client:
        r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, f"{name}=42: status {r.status_code}, want 400"
    error = r.json()["error"]
    assert error["param"] == name and "must be a string" in error["message"], error


# ---- LangChain's ChatOpenAI --------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_model(server):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=f"{server.url}/v1",
        api_key="x",
        model=MODEL_ID,
        temperature=0,
        max_tokens=8,
        max_retries=0,
        timeout=120,
    )


def test_langchain_chat_openai_invokes_and_streams_the_greedy_answer(server, chat_model):
    """ChatOpenAI.invoke answers with an AIMessage holding what the openai client gets for the same
    greedy request, and .stream's chunks join to that same text"""
    from langchain_core.messages import AIMessage

    question = "What is the capital of France?"
    want = chat(server, question, max_tokens=8).choices[0].message.content
    got = chat_model.invoke(question)
    assert isinstance(got, AIMessage) and got.content, f"invoke returned {got!r}"
    assert got.content == want, f"ChatOpenAI answered {got.content!r}, the openai client {want!r}"
    streamed = "".join(chunk.content for chunk in chat_model.stream(question))
    assert streamed == want, f"ChatOpenAI's stream joined to {streamed!r}, not {want!r}"


def test_langchain_structured_output_is_refused_naming_response_format(chat_model):
    """with_structured_output (json_schema) gets the server's 400 as an error naming response_format,
    never a hang or an unconstrained answer parsed as if it were JSON"""
    schema = {
        "title": "Capital",
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    structured = chat_model.with_structured_output(schema, method="json_schema")
    with pytest.raises(openai.BadRequestError, match="response_format json_schema is not supported"):
        structured.invoke("What is the capital of France?")


def test_dojo_serve_answers_then_stops_on_ctrl_c(tmp_path):
    """The `dojo serve` command itself (its engine loop on the main thread, uvicorn on another): it
    answers a chat completion, and Ctrl-C (SIGINT) stops it with "stopped" and exit status 0."""
    import os
    import signal
    import sys

    env = os.environ | {"DOJO_WORKSPACE": str(tmp_path), "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dojo", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        lines = []
        while not (found := re.search(r"at (http://127\.0\.0\.1:\d+)/v1", lines[-1] if lines else "")):
            lines.append(proc.stdout.readline())
            assert lines[-1] and len(lines) < 50, f"dojo serve never said where it serves: {lines}"
        client = openai.OpenAI(base_url=f"{found[1]}/v1", api_key="unused", max_retries=3, timeout=120)
        answer = client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0
        )
        assert answer.choices[0].message.content, "dojo serve answered with no text"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, f"dojo serve exited {proc.returncode} after Ctrl-C:\n{out[-2000:]}"
    assert "stopped" in out, out[-2000:]
