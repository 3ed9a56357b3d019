"""An OpenAI-compatible HTTP server for the engine: chat and text completions, streamed or whole.

`build_app(engine, tokenizer, model_id)` returns a Starlette (ASGI) app: POST /v1/chat/completions,
POST /v1/completions, GET /v1/models, /v1/models/{id} and /health. With `"stream": true` answers
come as server-sent events. Sampling follows OpenAI's parameters through the sampling kata's chain
(penalties, logit_bias; stop strings and chat logprobs by its StopChecker and Sampled), and errors come in
OpenAI's shape with a 4xx (a 500 inside). A client that disconnects mid-stream cancels its request. Each
request logs one line at info on REQUEST_LOG. `n` > 1 (up to MAX_N) runs n requests on one prompt:
the prefix cache shares its full blocks, and with a seed choice i draws from seed + i. The prefix cache
is salted per tenant (`_tenant_salt`): the bearer token, hashed, and `prompt_cache_key` if given, so
two API keys never share cached blocks. Not here: the completions endpoint's logprobs, tools, JSON
modes, images: each is refused with a 400 naming it, while its explicit default (null, false, []) is
accepted; authentication (any key is served).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from solutions.sampling import StopChecker
from solutions.system.serving.engine import SamplingParams

MODEL_ID = "SmolLM2-135M-Instruct"  # what /v1/models lists and requests name
REQUEST_LOG = logging.getLogger("solutions.system.serving.requests")  # `dojo serve` gives it a handler

# parameters a client may send that this server does not implement, and the values that mean "unused"
# (frameworks send the explicit defaults on every call: "logprobs": false, "top_logprobs": 0)
UNSUPPORTED = {
    "tools": ([],),
    "functions": ([],),
    "tool_choice": ("none",),
    "parallel_tool_calls": (False, True),
    "best_of": (1,),
    "echo": (False,),
    "suffix": ("",),
}
WHY_UNSUPPORTED = {
    "tools": "tool (function) calling is not supported by this server",
    "functions": "function calling is not supported by this server",
    "tool_choice": "tool (function) calling is not supported by this server",
}
MAX_BODY = 4 * 2**20  # bytes of one request body: a full 8,192-token context is far below it
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_STOP = 4  # stop strings one request may give
MAX_N = 8  # choices one request may ask for
FILTERED_LOGPROB = -9999.0  # what a token the filters removed (logprob -inf, not JSON) is reported as


class APIError(Exception):
    """A request the server refuses: HTTP status and OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
        return JSONResponse({"error": error}, status_code=self.status)


class Answer:
    """One completion's text as its tokens arrive: whole characters only, cut before the first stop
    string (solutions.sampling.StopChecker), and its logprobs entries (OpenAI's chat shape) when asked.

    `add(token, sampled)` returns the text safe to show now; `stopped` turns true at a stop string.
    Every token but the EOS gets a logprobs entry, the one a stop string ends on too (its text past the
    stop's start is never shown)."""

    def __init__(self, token_bytes: list[bytes], eos: int, stop: list[str], logprobs: bool):
        self.checker, self.token_bytes, self.eos = StopChecker(token_bytes, stop), token_bytes, eos
        self.logprobs: list[dict] | None = [] if logprobs else None
        self.stopped = False
        self.tokens = 0  # completion tokens, the EOS and the stop string's included (usage)
        self.last: int | None = None

    def add(self, token: int, sampled=None) -> str:
        self.tokens, self.last = self.tokens + 1, token
        if token == self.eos:
            return ""
        shown, self.stopped = self.checker.feed(token)
        if self.logprobs is not None:
            top = zip(sampled.top_ids[0].tolist(), sampled.top_logprobs[0].tolist())
            self.logprobs.append(
                self._entry(token, float(sampled.logprobs[0]))
                | {"top_logprobs": [self._entry(i, p) for i, p in top]}
            )
        return shown

    def finish(self) -> str:
        """The text held back, once the answer ended without a stop string."""
        return "" if self.stopped else self.checker.finish()

    def finish_reason(self) -> str:
        return "stop" if self.stopped or self.last == self.eos else "length"

    def take_logprobs(self) -> dict | None:
        """The entries since the last call, as a choice's `logprobs` object (None when not asked)."""
        if self.logprobs is None:
            return None
        entries, self.logprobs = self.logprobs, []
        return {"content": entries, "refusal": None}

    def _entry(self, token: int, logprob: float) -> dict:
        data = self.token_bytes[token]
        logprob = logprob if logprob > float("-inf") else FILTERED_LOGPROB
        return {"token": data.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(data)}


def build_app(engine, tokenizer, model_id: str = MODEL_ID) -> Starlette:
    """The ASGI app serving `engine` (solutions.system.serving.engine.Engine) as `model_id`."""
    eos, vocab = tokenizer.eos_token_id, engine.model.config.vocab_size
    created = int(time.time())
    table: list[bytes] = []  # each token's bytes, made on the first completion (StopChecker reads them)

    def answer(stop: list[str], logprobs: bool) -> Answer:
        if not table:
            table.extend(tokenizer.token_bytes())
        return Answer(table, eos, stop, logprobs)

    model_card = {"id": model_id, "object": "model", "created": created, "owned_by": "decode-dojo"}

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [model_card]})

    async def model(request: Request) -> Response:
        _check_model(request.path_params["model"], model_id)
        return JSONResponse(model_card)

    async def chat(request: Request) -> Response:
        body = await _json_body(request)
        _check_model(body.get("model"), model_id)
        salt = _tenant_salt(request, body)
        prompt = tokenizer.encode(tokenizer.apply_chat_template(_messages(body.get("messages"))))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        max_name = "max_tokens" if "max_tokens" in body else "max_completion_tokens"
        return await _complete(body, prompt, max_name, max_tokens, salt, chat=True)

    async def completions(request: Request) -> Response:
        body = await _json_body(request)
        _check_model(body.get("model"), model_id)
        for name in ("logprobs", "top_logprobs"):
            if body.get(name) not in (None, 0):  # false == 0: the explicit default
                shown = f"{name}={body[name]!r}"[:200]
                message = f"{shown}: logprobs are supported on /v1/chat/completions, not here"
                raise APIError(400, message, name, "unsupported_parameter")
        salt = _tenant_salt(request, body)
        prompt = _prompt_ids(body.get("prompt"), tokenizer)
        return await _complete(body, prompt, "max_tokens", body.get("max_tokens"), salt, chat=False)

    async def _complete(
        body: dict, prompt: list[int], max_name: str, max_tokens, salt: str | None, *, chat: bool
    ) -> Response:
        if any(not 0 <= t < vocab for t in prompt):
            raise APIError(400, f"prompt token ids must lie in [0, {vocab})", "prompt")
        params = _sampling(
            body, len(prompt), engine.context, max_name, max_tokens, "messages" if chat else "prompt", vocab
        )
        stop, logprobs = _stop(body.get("stop")), chat and _logprobs(body, params)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise APIError(400, f"stream must be true or false, got {stream!r}", "stream")
        n = _n(body.get("n"))
        kind = "chatcmpl" if chat else "cmpl"
        head = {"id": f"{kind}-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": model_id}
        texts = [answer(stop, logprobs) for _ in range(n)]
        streams = [engine.submit(prompt, _choice_params(params, i), salt) for i in range(n)]
        if stream:
            usage = (body.get("stream_options") or {}).get("include_usage", False)
            return StreamingResponse(
                _events(streams, texts, head, chat, len(prompt), usage), media_type="text/event-stream"
            )

        async def whole(tokens, text: Answer) -> str:
            try:
                return "".join([piece async for piece in _pieces(tokens, text)]) + text.finish()
            finally:
                await tokens.aclose()  # a stop string: the engine drops the request now

        try:
            contents = await asyncio.gather(*(whole(t, x) for t, x in zip(streams, texts)))
        finally:
            for tokens in streams:
                await tokens.aclose()
        choices = []
        for i, (content, text) in enumerate(zip(contents, texts)):
            choice = (
                {"index": i, "message": {"role": "assistant", "content": content, "refusal": None}}
                if chat
                else {"index": i, "text": content}
            )
            choices.append(choice | {"finish_reason": text.finish_reason(), "logprobs": text.take_logprobs()})
        return JSONResponse(
            head
            | {
                "object": "chat.completion" if chat else "text_completion",
                "choices": choices,
                "usage": _usage(len(prompt), sum(t.tokens for t in texts), streams[0].cached_tokens),
            }
        )

    async def _events(
        streams: list, texts: list[Answer], head: dict, chat: bool, n_prompt: int, usage: bool
    ) -> AsyncIterator[str]:
        """The choices' chunks as server-sent events, interleaved as their tokens come, then usage."""
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(i: int, piece: str | None, finish: str | None = None) -> str:
            text = texts[i]
            if chat:
                delta = {} if piece is None else {"content": piece}
                choice = {"index": i, "delta": delta, "logprobs": text.take_logprobs()}
            else:
                choice = {"index": i, "text": piece or "", "logprobs": None}
            return _sse(head | {"object": obj, "choices": [choice | {"finish_reason": finish}]})

        queue: asyncio.Queue = asyncio.Queue()

        async def choice(i: int) -> None:
            try:
                if chat:
                    role = {"role": "assistant", "content": ""}
                    first = {"index": i, "delta": role, "logprobs": None, "finish_reason": None}
                    await queue.put(_sse(head | {"object": obj, "choices": [first]}))
                async for piece in _pieces(streams[i], texts[i]):
                    await queue.put(chunk(i, piece))
                if rest := texts[i].finish():
                    await queue.put(chunk(i, rest))
                await queue.put(chunk(i, None, texts[i].finish_reason()))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the engine stopped: the stream ends with the error
                await queue.put(exc)
            finally:
                await streams[i].aclose()
                await queue.put(None)

        tasks = [asyncio.create_task(choice(i)) for i in range(len(streams))]
        try:
            done = 0
            while done < len(tasks):
                item = await queue.get()
                if item is None:
                    done += 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
            if usage:
                used = _usage(n_prompt, sum(t.tokens for t in texts), streams[0].cached_tokens)
                yield _sse(head | {"object": obj, "choices": [], "usage": used})
            yield "data: [DONE]\n\n"
        finally:  # a client gone mid-stream: every choice's request is dropped now
            for task in tasks:
                task.cancel()
            for tokens in streams:
                await tokens.aclose()

    async def not_found(request: Request, exc: HTTPException) -> Response:
        return APIError(
            exc.status_code,
            f"{request.method} {request.url.path}: {exc.detail}",
            code="not_found" if exc.status_code == 404 else None,
        ).response()

    async def refused(request: Request, exc: APIError) -> Response:
        return exc.response()

    async def failed(request: Request, exc: Exception) -> Response:  # the engine stopped, or a bug
        return APIError(500, f"{type(exc).__name__}: {exc}", kind="server_error").response()

    routes = [
        Route("/health", health),
        Route("/v1/models", models),
        Route("/v1/models/{model:path}", model),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(RequestLog)],
        exception_handlers={HTTPException: not_found, APIError: refused, Exception: failed},
    )


class RequestLog:
    """ASGI middleware: one line per HTTP request on REQUEST_LOG at info, "POST /v1/completions 400 1.2 ms",
    timed to the response's last byte (a stream's end). A request that raised is logged as its 500."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500  # subtle: an exception reaches the 500 handler after us

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            ms = 1000 * (time.perf_counter() - start)
            REQUEST_LOG.info("%s %s %d %.1f ms", scope["method"], scope["path"], status, ms)


@contextmanager
def running(app, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `app` with uvicorn in a background thread; yields its base URL (port 0: any free
    port) and always shuts it down on leaving. Raises RuntimeError if it does not start in 30 s."""
    sock = bind(host, port)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one the OS picks). OSError if taken.
    Its connections send each write at once (TCP_NODELAY): with Nagle's algorithm a streamed token
    waited for the client's delayed ACK, 40 ms on Linux, on every request of a kept-alive connection."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto named, so asyncio's transports set TCP_NODELAY on each accepted connection as well
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it on Linux
    sock.bind((host, port))
    sock.listen(128)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


async def _json_body(request: Request) -> dict:
    raw = await _read_body(request)
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(
            400, f"the request body must be a JSON object, got {type(body).__name__}", code="invalid_json"
        )
    for name, unused in UNSUPPORTED.items():
        value = body.get(name)
        if value is not None and not any(_same(value, u) for u in unused):
            why = WHY_UNSUPPORTED.get(name, "is not supported by this server")
            shown = f"{name}={value!r}"[:200]
            message = f"{shown}: {why}" if name in WHY_UNSUPPORTED else f"{shown} {why}"
            raise APIError(400, message, name, "unsupported_parameter")
    _response_format(body.get("response_format"))
    return body


def _same(value, default) -> bool:
    """Whether `value` is `default` as JSON means it: 0 and 0.0 alike, never false for 0 or 1 for true."""
    if isinstance(default, bool) or isinstance(value, bool):
        return value is default
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float)) and value == default
    return type(value) is type(default) and value == default


async def _read_body(request: Request) -> bytes:
    """The request's body, refused with a 413 once past MAX_BODY (before reading it all, when the client
    says its length)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise APIError(413, _too_large(int(declared)), code="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise APIError(413, _too_large(size, more=True), code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, more: bool = False) -> str:
    return f"the request body is {'over ' if more else ''}{size} bytes: this server takes at most {MAX_BODY}"


def _response_format(value) -> None:
    """Plain text is all this server writes: a JSON mode it would silently ignore is refused."""
    if value is None:
        return
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return
    if kind in ("json_object", "json_schema"):
        raise APIError(
            400,
            f"response_format {kind} is not supported by this server: it writes plain text only "
            "(no constrained decoding)",
            "response_format",
            "unsupported_parameter",
        )
    raise APIError(
        400,
        f"response_format must be an object with type text, json_object or json_schema, got {value!r}"[:300],
        "response_format",
    )


def _tenant_salt(request: Request, body: dict) -> str | None:
    """The request's prefix-cache salt: a digest of its API key (the Authorization header's bearer
    token) and its `prompt_cache_key` (OpenAI's routing hint, here a narrower namespace); None when it
    has neither (one shared namespace). `user` and `safety_identifier` name end users for abuse
    monitoring: checked, not salted. APIError (400) when one of the three is not a string."""
    for name in ("prompt_cache_key", "user", "safety_identifier"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise APIError(400, f"{name} must be a string, got {body[name]!r}"[:300], name)
    auth = request.headers.get("authorization", "").strip()
    scheme, _, token = auth.partition(" ")
    key = token.strip() if scheme.lower() == "bearer" else auth
    cache_key = body.get("prompt_cache_key")
    if not key and not cache_key:
        return None
    # hashed: the key itself never reaches the engine's requests
    return hashlib.sha256(json.dumps([key or None, cache_key or None]).encode()).hexdigest()


def _check_model(name, model_id: str) -> None:
    if name != model_id:
        raise APIError(
            404,
            f"The model `{name}` does not exist: this server serves `{model_id}` (GET /v1/models)",
            "model",
            "model_not_found",
        )


def _messages(messages) -> list[dict[str, str]]:
    """The chat messages as {"role", "content": str}; content given as text parts is joined."""
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list of {role, content} objects", "messages")
    plain = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content
        ):
            content = "".join(p["text"] for p in content)
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(content, str) or not isinstance(role, str) or role not in ROLES:
            raise APIError(
                400,
                f"messages[{i}] needs a role (system, developer, user or assistant) and text content",
                f"messages[{i}]",
            )
        plain.append({"role": ROLES[role], "content": content})  # a developer message is read as system
    return plain


def _prompt_ids(prompt, tokenizer) -> list[int]:
    """One prompt: a string, a list holding one string, or a list of token ids."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return tokenizer.encode(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        return prompt
    raise APIError(
        400,
        "prompt must be one non-empty string or list of token ids "
        "(several prompts per request are not supported)",
        "prompt",
    )


def _sampling(
    body: dict, n_prompt: int, context: int, max_name: str, max_tokens, prompt_name: str, vocab: int
) -> SamplingParams:
    """SamplingParams from the request; APIError (400) naming the parameter that cannot work."""
    if n_prompt >= context:
        raise APIError(
            400,
            f"This model's maximum context length is {context} tokens, and the prompt alone has {n_prompt}.",
            prompt_name,
            "context_length_exceeded",
        )
    if max_tokens is None:
        max_tokens = context - n_prompt
    elif isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise APIError(400, f"{max_name} must be a positive integer, got {max_tokens!r}", max_name)
    elif n_prompt + max_tokens > context:
        raise APIError(
            400,
            f"This model's maximum context length is {context} tokens. However, you "
            f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the prompt, "
            f"{max_tokens} in the completion).",
            max_name,
            "context_length_exceeded",
        )
    values = {}
    ranges = [("temperature", 1.0, 0.0, 2.0), ("top_p", 1.0, 0.0, 1.0)]
    ranges += [("presence_penalty", 0.0, -2.0, 2.0), ("frequency_penalty", 0.0, -2.0, 2.0)]
    for name, default, low, high in ranges:
        value = body.get(name)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise APIError(400, f"{name} must be a number in [{low:g}, {high:g}], got {value!r}", name)
        values[name] = float(value)
    if values["top_p"] == 0:
        raise APIError(400, "top_p must be above 0", "top_p")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise APIError(400, f"seed must be an integer, got {seed!r}", "seed")
    top = body.get("top_logprobs")
    top = 0 if top is None else top
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20:
        raise APIError(400, f"top_logprobs must be an integer in [0, 20], got {top!r}", "top_logprobs")
    return SamplingParams(
        max_tokens,
        values["temperature"],
        values["top_p"],
        seed,
        values["presence_penalty"],
        values["frequency_penalty"],
        _logit_bias(body.get("logit_bias"), vocab),
        top,
    )


def _logit_bias(value, vocab: int) -> dict[int, float] | None:
    """{"token id": bias in [-100, 100]} (JSON keys are strings) as {int: float}; null or {} is none."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise APIError(
            400, f"logit_bias must be an object of token id: bias, got {value!r}"[:300], "logit_bias"
        )
    bias = {}
    for key, b in value.items():
        token = int(key) if isinstance(key, str) and key.isdigit() else None
        if token is None or not token < vocab:
            raise APIError(
                400, f"logit_bias keys must be token ids in [0, {vocab}), got {key!r}"[:300], "logit_bias"
            )
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not -100 <= b <= 100:
            raise APIError(
                400, f"logit_bias[{key}] must be a number in [-100, 100], got {b!r}"[:300], "logit_bias"
            )
        bias[token] = float(b)
    return bias


async def _pieces(tokens, text: Answer) -> AsyncIterator[str]:
    """The text pieces of `tokens` (an engine TokenStream) through `text`, until it ends or stops."""
    i = 0
    async for token in tokens:
        piece = text.add(token, tokens.sampled(i))
        i += 1
        if piece:
            yield piece
        if text.stopped:
            return


def _n(value) -> int:
    """How many choices: null is 1; else an integer in [1, MAX_N]."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_N:
        raise APIError(400, f"n must be an integer in [1, {MAX_N}], got {value!r}"[:300], "n")
    return value


def _choice_params(params: SamplingParams, i: int) -> SamplingParams:
    """Choice i's parameters: with a seed, seed + i, so the choices differ and each repeats."""
    return params if params.seed is None or i == 0 else dataclasses.replace(params, seed=params.seed + i)


def _stop(value) -> list[str]:
    """The stop strings: one string or a list of at most MAX_STOP; null, "" and [] mean none."""
    if value is None or value == "" or value == []:
        return []
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP
        or not all(isinstance(x, str) and x for x in stops)
    ):
        raise APIError(
            400,
            f"stop must be a string or a list of at most {MAX_STOP} non-empty strings, got {value!r}"[:300],
            "stop",
        )
    return stops


def _logprobs(body: dict, params: SamplingParams) -> bool:
    """Whether the chat answer reports logprobs ("logprobs": true; "top_logprobs" needs it)."""
    value = body.get("logprobs")
    if value is not None and not isinstance(value, bool):
        raise APIError(400, f"logprobs must be true or false, got {value!r}", "logprobs")
    if params.top_logprobs and not value:
        raise APIError(400, "top_logprobs needs logprobs set to true", "top_logprobs")
    return bool(value)


def _usage(n_prompt: int, n_new: int, cached: int = 0) -> dict:
    """OpenAI's usage object; cached: the prompt tokens the prefix cache held (prompt_tokens_details)."""
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_new,
        "total_tokens": n_prompt + n_new,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
