"""What the BPE kata's follow-ups say about tiktoken and special tokens, checked on the installed tiktoken.

`Encoding.encode` raises on text that contains a special token (its default is
`disallowed_special="all"`); `encode_ordinary(text)` and `encode(text, disallowed_special=())`
encode that text as ordinary bytes; only `allowed_special` makes it the special id. The encoding is
built here (256 single bytes, no merges, one special token), so nothing is downloaded.
"""

from __future__ import annotations

import pytest
import tiktoken  # a missing tiktoken fails the module (`make setup` installs it), never skips

EOT = "<|endoftext|>"
TEXT = "hi" + EOT
AS_BYTES = list(TEXT.encode("utf-8"))


@pytest.fixture(scope="module")
def enc() -> tiktoken.Encoding:
    return tiktoken.Encoding(
        name="bytes_and_eot",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={EOT: 256},
    )


def test_encode_raises_on_special_token_text_by_default(enc):
    """encode(text) with text holding a special token raises ValueError (disallowed_special="all")"""
    with pytest.raises(ValueError, match="disallowed special token"):
        enc.encode(TEXT)


def test_encode_ordinary_encodes_it_as_plain_text(enc):
    """encode_ordinary(text): the special token's text becomes its bytes, not id 256"""
    assert enc.encode_ordinary(TEXT) == AS_BYTES, f"encode_ordinary gave {enc.encode_ordinary(TEXT)}"


def test_empty_disallowed_special_encodes_it_as_plain_text(enc):
    """encode(text, disallowed_special=()): no error, the special token's text becomes its bytes"""
    assert enc.encode(TEXT, disallowed_special=()) == AS_BYTES, "disallowed_special=() did not give the bytes"


def test_allowed_special_gives_the_special_id(enc):
    """encode(text, allowed_special="all") (or {EOT}): the special token's text becomes id 256"""
    assert enc.encode(TEXT, allowed_special="all") == [104, 105, 256], (
        "allowed_special='all' did not give id 256"
    )
    assert enc.encode(TEXT, allowed_special={EOT}) == [104, 105, 256], (
        "allowed_special={EOT} did not give id 256"
    )
