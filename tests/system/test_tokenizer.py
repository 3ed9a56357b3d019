"""SmolLM2's tokenizer (solutions/system/loading/tokenizer.py) against a HuggingFace `tokenizers` peer.

The peer is built here, straight from the GGUF's vocabulary and merges, with the pre-tokenizer the
GGUF names `smollm`: Digits(individual_digits=True) then ByteLevel(add_prefix_space=False), and the
17 control tokens as special tokens. (transformers' own GGUF loader drops the digit step, so it is
not the peer.) The corpus is a few thousand generated strings: code, numbers, whitespace runs,
emoji, special tokens, scripts from Latin to CJK, and random code points.
"""

from __future__ import annotations

import random
import re
import sysconfig
from pathlib import Path

import pytest
import transformers

from solutions.system.loading.tokenizer import (
    SMOLLM_PATTERN,
    load_tokenizer,
    read_tokenizer,
    save_tokenizer,
    tokenizer_from_gguf,
)
from solutions.system.loading.weights import find_gguf, open_gguf

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<file_sep>", "<repo_name>", "<jupyter_code>"]
WORDS = [
    "the",
    "The",
    " quick",
    "brown",
    "fox's",
    "don't",
    "I'LL",
    "we've",
    "naïve",
    "café",
    "Straße",
    "привет",
    "мир",
    "γειά",
    "שלום",
    "مرحبا",
    "नमस्ते",
    "你好",
    "世界",
    "こんにちは",
    "안녕하세요",
    "ไทย",
    "e\u0301",
    "a\u0308\u0323",
    "😀",
    "👍🏽",
    "👨‍👩‍👧‍👦",
    "🇫🇷",
    "∑",
    "∫x²dx",
    "½",
    "Ⅻ",
    "٣٤",
    "१२",
    "𝟙𝟚",
    "x²",
    "3.14159",
    "1,000,000",
    "0xFF",
    "2024-01-31",
    "+44 20 7946 0958",
    "v1.2.3",
    "$5",
    "50%",
    "def",
    "return",
    "self.x",
    "__init__",
    "{",
    "}",
    "()",
    "[]",
    "=>",
    "!=",
    "==",
    "->",
    "#",
    "//",
    "<",
    "|",
    ">",
    "<|",
    "|>",
    "<|im_",
    "\\n",
    "'",
    '"',
    "`",
    "...",
    "—",
    "–",
    "…",
    "«",
    "»",
]
SPACES = [
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    " \n ",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\u200b",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\u2009",
    "\u202f",
    "    ",
    "\t\t\n",
]


def corpus(seed: int = 0) -> list[str]:
    """About 3 000 strings, the same every run (seeded; code comes from the stdlib's source)."""
    rnd = random.Random(seed)
    out: list[str] = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("textwrap.py", "json/encoder.py", "string.py", "heapq.py", "fractions.py", "shlex.py"):
        source = (stdlib / name).read_text(encoding="utf-8")
        for _ in range(100):  # code: slices of real Python, with its indentation and blank lines
            start = rnd.randrange(len(source))
            out.append(source[start : start + rnd.randrange(1, 400)])
    for _ in range(600):  # digits: numbers of every shape, next to letters and spaces
        number = "".join(rnd.choice("0123456789") for _ in range(rnd.randrange(1, 12)))
        out.append(
            rnd.choice(["", " ", "  ", "x", "$", "\n", "a "])
            + number
            + rnd.choice(["", " ", ".5", "px", "  ", "\n"])
        )
    for _ in range(600):  # whitespace runs between words
        out.append(
            "".join(
                rnd.choice(WORDS) + rnd.choice(SPACES) * rnd.randrange(0, 4)
                for _ in range(rnd.randrange(1, 8))
            )
        )
    for _ in range(500):  # special tokens, whole and broken, inside text
        pieces = rnd.choices(WORDS + SPACES + SPECIALS * 3, k=rnd.randrange(1, 10))
        out.append("".join(pieces))
    for _ in range(400):  # random code points from all planes (no surrogates)
        points = [
            rnd.choice(
                [
                    rnd.randrange(0x20, 0x80),
                    rnd.randrange(0x80, 0x800),
                    rnd.randrange(0x800, 0xD800),
                    rnd.randrange(0xE000, 0x10000),
                    rnd.randrange(0x10000, 0x110000),
                    rnd.randrange(0, 0x20),
                ]
            )
            for _ in range(rnd.randrange(1, 20))
        ]
        out.append("".join(map(chr, points)))
    out += [
        "",
        " ",
        "  12",
        "a  1",
        "x\u00a0\u00a05",
        "!\x04!",
        "<|im_start|><|im_end|>",
        "<|im_start|>>",
        "1" * 50,
    ]
    return out


@pytest.fixture(scope="module")
def reader():
    return open_gguf(find_gguf())


@pytest.fixture(scope="module")
def ours(reader):
    return tokenizer_from_gguf(reader)


@pytest.fixture(scope="module")
def peer(reader):
    return tokenizers_peer(reader)


def tokenizers_peer(reader):
    """A `tokenizers` BPE over the GGUF's own vocabulary and merges (independent of our code).
    benchmarks/bpe_bench.py uses it too."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ")) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, kind in zip(tokens, types) if kind == 3]
    )
    return tok


def test_encode_matches_tokenizers_peer(ours, peer):
    """SmolLM2 tokenization equals the HF `tokenizers` peer on ~3 000 varied strings"""
    texts = corpus()
    assert len(texts) > 2500
    want = [e.ids for e in peer.encode_batch(texts, add_special_tokens=False)]
    got = [ours.encode(t) for t in texts]
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not bad, (
        f"{len(bad)} of {len(texts)} strings differ; shortest: {min(bad, key=lambda b: len(b[0]))}"
    )


def test_decode_round_trips(ours):
    """decode(encode(text)) == text wherever the vocabulary has every byte of the text"""
    vocab_bytes = {bs[0] for bs in ours.bpe.vocab.values() if len(bs) == 1}
    missing = set(range(256)) - vocab_bytes
    for text in corpus(seed=1):
        if set(text.encode("utf-8")) & missing:
            continue  # SmolLM2 has no token for 21 bytes (e.g. 0x04, 0xF5..0xFF): they are dropped
        got = ours.decode(ours.encode(text))
        assert got == text, f"decode(encode({text!r})) gave {got!r}"


def test_special_tokens_and_eos(ours, peer):
    """the 17 control tokens encode whole; turns end with <|im_end|>, the eos id"""
    assert len(ours.special_tokens) == 17, f"got {len(ours.special_tokens)} special tokens, want 17"
    assert ours.encode("<|im_end|>") == [ours.eos_token_id] == [2], "eos must be <|im_end|> (id 2)"
    assert ours.encode("<|im_start|>user") == [1, 4093], ours.encode("<|im_start|>user")
    assert ours.vocab_size == 49152 == peer.get_vocab_size()


def test_digits_split_one_by_one(ours):
    """digits are split one by one, and a space before a number stays its own token"""
    ids = ours.encode("  12")
    assert [ours.decode([i]) for i in ids] == ["  ", "1", "2"], [ours.decode([i]) for i in ids]
    assert SMOLLM_PATTERN.startswith(r"\p{N}|")


MESSAGES = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and <|im_end|> 3+3?\n\n"},
    ],
    [{"role": "user", "content": ""}],
]


@pytest.mark.parametrize("generation_prompt", [True, False])
def test_chat_template_matches_transformers(reader, ours, peer, generation_prompt):
    """apply_chat_template renders the GGUF template exactly as transformers does"""
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=peer)
    hf.chat_template = reader.fields["tokenizer.chat_template"].contents()
    for messages in MESSAGES:
        want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        got = ours.apply_chat_template(messages, add_generation_prompt=generation_prompt)
        assert got == want, f"chat template for {messages}: got {got!r}, want {want!r}"
    prompt = ours.apply_chat_template(MESSAGES[0])
    assert (
        prompt.endswith("<|im_start|>assistant\n") and "You are a helpful AI assistant named SmolLM" in prompt
    )


def test_bad_inputs(tmp_path):
    """a missing file, a non-GGUF file and a malformed message are clear errors"""
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "nope.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file")
    with pytest.raises(ValueError, match="not a GGUF"):
        load_tokenizer(tmp_path / "junk.gguf")


def test_bad_message(ours):
    """a chat message without string role and content is a ValueError"""
    with pytest.raises(ValueError, match="message 0"):
        ours.apply_chat_template([{"role": "user"}])


def test_gpt2_vocabulary_errors_name_the_problem():
    """from_gpt2: a token outside the byte-level alphabet (above U+00FF, or a control character the
    alphabet maps elsewhere) and a merge whose parts are unknown are ValueErrors naming them; a good
    small vocabulary gives the bytes and merges it spells"""
    from solutions.bpe import BPETokenizer, bytes_to_unicode

    alphabet = list(bytes_to_unicode().values())
    vocab = {ch: i for i, ch in enumerate(alphabet)} | {"Ġt": 256, "Ġth": 257}
    tok = BPETokenizer.from_gpt2(vocab, ["Ġ t", "Ġt h"])
    assert tok.vocab[256] == b" t" and tok.vocab[257] == b" th" and tok.vocab[10] == b"\n"
    assert tok.merges == {(32, 116): 256, (256, 104): 257} and tok.encode(" th") == [257]
    for bad in ("x\u4e00", "a\n"):  # U+4E00: beyond the alphabet; "\n": a byte the alphabet spells as "Ċ"
        with pytest.raises(ValueError, match=re.escape(f"uses {bad[-1]!r}, not a byte-level character")):
            BPETokenizer.from_gpt2(vocab | {bad: 258}, [])
    with pytest.raises(ValueError, match=r"merge 1 \('Ġt q'\) uses a token missing"):
        BPETokenizer.from_gpt2(vocab, ["Ġ t", "Ġt q"])
    with pytest.raises(ValueError, match=r"merge 0 \('t h'\) uses a token missing"):  # "th" is not a token
        BPETokenizer.from_gpt2(vocab, ["t h"])


def test_a_saved_tokenizer_reads_back_the_same(ours, tmp_path):
    """save_tokenizer then read_tokenizer: the same vocabulary, merges in the same order, special
    tokens, byte ids, whole tokens and fields, and the same ids for the corpus"""
    path = tmp_path / "tokenizer.json"
    save_tokenizer(ours, path)
    back = read_tokenizer(path)
    a, b = ours.bpe, back.bpe
    assert b.vocab == a.vocab and list(b.merges.items()) == list(a.merges.items())
    assert b.special_tokens == a.special_tokens and b._byte_ids == a._byte_ids
    assert b.whole_tokens == a.whole_tokens and back.fields == ours.fields
    assert (back.eos_token_id, back.bos_token_id, back.chat_template) == (
        ours.eos_token_id,
        ours.bos_token_id,
        ours.chat_template,
    )
    for text in corpus()[::7]:
        assert back.encode(text) == ours.encode(text), text


def test_a_damaged_saved_tokenizer_is_a_clear_error(ours, tmp_path):
    """a file that is not a saved tokenizer, or one whose tables do not fit together, is a ValueError
    naming the file and the problem, never a tokenizer that encodes wrongly"""
    import base64
    import json

    path = tmp_path / "tokenizer.json"
    save_tokenizer(ours, path)
    good = json.loads(path.read_text(encoding="utf-8"))
    triples = base64.b64decode(good["merges"])
    damaged = {
        "format 'smollm2-tokenizer v1'": good | {"format": "smollm2-tokenizer v1"},
        r"add up to \d+ bytes, the file holds \d+": good | {"lengths": good["lengths"][:-1]},
        r"least -1\)": good | {"lengths": [-1] + good["lengths"][1:]},
        "not triples": good | {"merges": base64.b64encode(triples[:-4]).decode()},
        "not triples of token ids": good
        | {"merges": base64.b64encode(triples[:-4] + (10**6).to_bytes(4, "little")).decode()},
        "missing from the vocabulary": good
        | {"merges": base64.b64encode(triples[:-4] + (2).to_bytes(4, "little")).decode()},
        "binascii|base64|Incorrect padding|Non-base64": good | {"merges": "@@@"},
        "KeyError": {k: v for k, v in good.items() if k != "special_tokens"},
        "is not a special token": good | {"special_tokens": {}},
        "not 'smollm'": good | {"fields": good["fields"] | {"tokenizer.ggml.pre": "llama3"}},
    }
    for why, data in damaged.items():
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        with pytest.raises(ValueError, match=f"{path.name} is not a saved SmolLM2 tokenizer: .*({why})"):
            read_tokenizer(path)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="is not a saved SmolLM2 tokenizer: JSONDecodeError"):
        read_tokenizer(path)
