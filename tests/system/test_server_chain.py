"""The server's sampling parameters through the sampling kata's chain, on the tiny random model (no file).

A letter tokenizer (token i is one letter) and the engine on the tiny model behind the real app, driven by
Starlette's TestClient: a stop string spanning tokens ends the answer before it, streamed or whole;
chat logprobs list each token with its alternatives, the same streamed; presence_penalty and logit_bias
pick the tokens the chain picks; bad values are 400s naming the parameter.
"""

from __future__ import annotations

import json
import string

import pytest
import torch

from solutions.model import tiny_model
from solutions.sampling import make_chain
from solutions.system.decoding import Chooser, chain_generate
from solutions.system.serving.engine import Engine
from solutions.system.serving.server import MODEL_ID, build_app

EOS = 7
NEW = 24


class Letters:
    """Token i is the letter string.ascii_letters[i % 52]; a prompt's text is its letters' ids."""

    eos_token_id = EOS

    def __init__(self, vocab: int):
        self.vocab = vocab

    def token_bytes(self) -> list[bytes]:
        return [string.ascii_letters[i % 52].encode() for i in range(self.vocab)]

    def apply_chat_template(self, messages) -> str:
        return messages[-1]["content"]

    def encode(self, text: str) -> list[int]:
        return [string.ascii_letters.index(c) for c in text]

    def decode(self, ids) -> str:
        return "".join(string.ascii_letters[i % 52] for i in ids)


@pytest.fixture(scope="module")
def model():
    return tiny_model(seed=1)


@pytest.fixture(scope="module")
def client(model):
    from starlette.testclient import TestClient

    engine = Engine(model, EOS)
    engine.start()
    try:
        with TestClient(build_app(engine, Letters(model.config.vocab_size))) as c:
            yield c
    finally:
        engine.close()


def post(client, body: dict, path: str = "chat/completions"):
    base = {"model": MODEL_ID, "max_tokens": NEW, "temperature": 0}
    if path == "chat/completions":
        base["messages"] = [{"role": "user", "content": "Hello"}]
    else:
        base["prompt"] = [1, 2, 3]
    return client.post(f"/v1/{path}", json=base | body)


def streamed(client, body: dict) -> list[dict]:
    """The chunks of a streamed chat answer (the [DONE] line dropped)."""
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={
            "model": MODEL_ID,
            "max_tokens": NEW,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Hello"}],
            "stream": True,
        }
        | body,
    ) as r:
        lines = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def content(answer: dict) -> str:
    return answer["choices"][0]["message"]["content"]


def test_a_stop_string_across_tokens_ends_the_answer_before_it(client):
    """stop = three letters from inside the plain answer (three tokens): the answer is the text before
    its first occurrence, finish_reason "stop", whole and streamed; logprobs and usage count the tokens
    up to the one that completed it"""
    plain = content(post(client, {}).json())
    assert len(plain) >= 8, f"the tiny model's answer is too short to cut: {plain!r}"
    stop = plain[4:7]
    want = plain[: plain.index(stop)]
    got = post(client, {"stop": [stop, "@never@"]}).json()
    assert (content(got), got["choices"][0]["finish_reason"]) == (want, "stop"), (stop, plain)
    chunks = streamed(client, {"stop": stop})
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == want, f"streamed with stop {stop!r}: {text!r}, want {want!r}"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    logged = post(client, {"stop": stop, "logprobs": True}).json()
    entries = logged["choices"][0]["logprobs"]["content"]  # up to the token that completed the stop
    assert "".join(e["token"] for e in entries) == plain[: plain.index(stop) + len(stop)], entries
    assert logged["usage"]["completion_tokens"] == len(entries)


def test_chat_logprobs_list_each_token_with_its_alternatives(client):
    """logprobs true, top_logprobs 3, greedy: one entry per shown token, adding up to the text; each
    logprob <= 0 and the token its own top alternative; the stream's entries are the same"""
    got = post(client, {"logprobs": True, "top_logprobs": 3}).json()
    entries = got["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == content(got)
    for e in entries:
        assert e["logprob"] <= 0 and e["bytes"] == list(e["token"].encode())
        assert len(e["top_logprobs"]) == 3 and e["top_logprobs"][0]["token"] == e["token"], e
        assert e["top_logprobs"][0]["logprob"] == e["logprob"]
    chunks = streamed(client, {"logprobs": True, "top_logprobs": 3})
    streamed_entries = [
        e for c in chunks if c["choices"] for e in (c["choices"][0]["logprobs"] or {}).get("content", [])
    ]
    assert streamed_entries == entries, "the streamed logprobs differ from the whole answer's"
    assert post(client, {}).json()["choices"][0]["logprobs"] is None


def test_penalties_and_logit_bias_choose_as_the_chain_does(client, model):
    """presence_penalty 1.5 and frequency_penalty 0.5 (greedy) answer as chain_generate with the same chain;
    logit_bias +100 on one token makes every token that one"""
    prompt = Letters(model.config.vocab_size).encode("Hello")
    chain = make_chain(presence_penalty=1.5, frequency_penalty=0.5)
    with torch.inference_mode():
        want = chain_generate(
            model, [prompt], Chooser(chain, [prompt], greedy=True), max_new_tokens=NEW, eos_token_id=EOS
        )
    letters = Letters(model.config.vocab_size).decode(t for t in want.tokens[0] if t != EOS)
    got = post(client, {"presence_penalty": 1.5, "frequency_penalty": 0.5}).json()
    assert content(got) == letters, "the penalised answer is not the chain's"
    assert content(got) != content(post(client, {}).json()), (
        "the penalties changed nothing: the test shows nothing"
    )
    biased = content(post(client, {"logit_bias": {"30": 100}, "max_tokens": 5}).json())
    assert biased == string.ascii_letters[30] * 5, biased


@pytest.mark.parametrize(
    "extra, param, words",
    [
        ({"presence_penalty": 3}, "presence_penalty", "[-2, 2]"),
        ({"frequency_penalty": "1"}, "frequency_penalty", "[-2, 2]"),
        ({"logit_bias": {"x": 1}}, "logit_bias", "token ids"),
        ({"logit_bias": {"100000": 1}}, "logit_bias", "token ids"),
        ({"logit_bias": {"5": 101}}, "logit_bias", "[-100, 100]"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
        ({"stop": [""]}, "stop", "non-empty"),
        ({"top_logprobs": 2}, "top_logprobs", "needs logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "[0, 20]"),
        ({"logprobs": 1}, "logprobs", "true or false"),
        ({"n": 0}, "n", "[1, 8]"),
        ({"n": 9}, "n", "[1, 8]"),
        ({"n": True}, "n", "[1, 8]"),
    ],
)
def test_bad_values_are_refused_by_name(client, extra, param, words):
    """a bad penalty, bias, stop or logprobs value gets a 400 naming the parameter and what it must be"""
    r = post(client, extra)
    assert r.status_code == 400, f"{extra}: status {r.status_code}, want 400"
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_completions_logprobs_are_refused(client):
    """the completions endpoint's own logprobs format is not implemented: a 400 saying where logprobs are"""
    r = post(client, {"logprobs": 2}, path="completions")
    assert r.status_code == 400 and "chat/completions" in r.json()["error"]["message"], r.text
    assert post(client, {"logprobs": 0}, path="completions").status_code == 200


def test_n_choices_each_answer_as_one_request_would(client):
    """n = 3 greedy: three identical choices indexed 0-2, usage counting all their tokens; n = 2 seeded
    sampling: choice i is what a lone request seeded seed + i answers; streamed, each choice's chunks
    carry its index and add up to the same answers"""
    one = post(client, {}).json()
    three = post(client, {"n": 3}).json()
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in three["choices"]] == [content(one)] * 3
    assert three["usage"]["completion_tokens"] == 3 * one["usage"]["completion_tokens"]
    assert three["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    sampled = {"temperature": 1.0, "seed": 11}
    two = post(client, sampled | {"n": 2}).json()
    alone = [content(post(client, sampled | {"seed": 11 + i}).json()) for i in range(2)]
    assert [c["message"]["content"] for c in two["choices"]] == alone
    assert alone[0] != alone[1], "seeds 11 and 12 drew the same answer: the test shows nothing"
    chunks = streamed(client, sampled | {"n": 2, "stream_options": {"include_usage": True}})
    texts = {0: "", 1: ""}
    for c in chunks:
        for choice in c["choices"]:
            texts[choice["index"]] += choice["delta"].get("content") or ""
    assert [texts[0], texts[1]] == alone
    assert chunks[-1]["usage"]["completion_tokens"] == two["usage"]["completion_tokens"]
