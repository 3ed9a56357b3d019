"""solutions/pretokenize.py: `Splitter.findall` finds exactly `regex`'s chunks, fast path or not."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from solutions.pretokenize import ASCII_TWINS, GPT2_PATTERN, GPT4_PATTERN, SMOLLM_PATTERN, Splitter

FAST = {"gpt2": GPT2_PATTERN, "smollm": SMOLLM_PATTERN}
# Characters where the twins or the cuts could go wrong: every ASCII character (\x1c-\x1f are
# whitespace to str.isspace but not to regex's \s), letters, digits and numbers that are not
# digits (², ½, Ⅻ, ٣), Unicode whitespace (\x85, no-break space, line separator, ideographic
# space), a combining accent, CJK and an emoji.
ODD = "éß²½Ⅻ٣\x85\xa0\u2028\u3000\u0301中😀"
ASCII_TEXT = st.text(st.characters(max_codepoint=127), max_size=60)
# Mostly newlines, spaces, letters, digits and punctuation, so that cuts and lookaheads meet.
MIXED_TEXT = st.text(st.sampled_from(list("\n\n\n  \tab1'.s\x1c") + list(ODD)), max_size=60)


def chunks(pattern: str, text: str) -> list[str]:
    return regex.compile(pattern).findall(text)


@pytest.mark.parametrize("name", FAST)
def test_twin_covers_each_ascii_character_as_regex_does(name):
    """Each ASCII character alone, and after a space, a letter, a digit and a newline."""
    split = Splitter(FAST[name])
    for code in range(128):
        for text in (chr(code), f" {chr(code)}", f"a{chr(code)}b", f"7{chr(code)}7", f"\n{chr(code)}\n  "):
            assert split.findall(text) == chunks(FAST[name], text), f"{name} twin splits {text!r} differently"


@pytest.mark.parametrize("name", FAST)
@settings(max_examples=400, deadline=None)
@given(text=ASCII_TEXT)
def test_ascii_text_splits_as_regex_does(name, text):
    assert Splitter(FAST[name]).findall(text) == chunks(FAST[name], text)


@pytest.mark.parametrize("name", FAST)
@settings(max_examples=1500, deadline=None)
@given(text=MIXED_TEXT)
def test_mixed_text_splits_as_regex_does(name, text):
    """Non-ASCII characters send stretches to `regex`; the cuts between stretches change nothing
    (stretch=1: a cut at every place one is allowed)."""
    assert Splitter(FAST[name], stretch=1).findall(text) == chunks(FAST[name], text)


@pytest.mark.parametrize("name", FAST)
@pytest.mark.parametrize(
    "text",
    [
        "é \n\nx",  # a cut after whitespace would split " \n" from "\n"
        "x \n\né",
        "a.\n\n  b\né\nc\n d",
        "é\n" * 3 + "plain ascii\nline\n" + "ß",
        "\né",
        "é\n",
        "1\n2é3\n\n4",
        "x\x1c\nyé",  # \x1c is not \s to regex: no cut after it is needed, none is made
    ],
)
def test_cut_examples(name, text):
    for stretch in (1, 2, 1024):
        assert Splitter(FAST[name], stretch).findall(text) == chunks(FAST[name], text), f"stretch={stretch}"


def test_long_text_with_few_non_ascii_characters():
    """The benchmark's case: long ASCII lines with a rare accent, split in many stretches."""
    text = "".join(
        f"Line {i}: it's a test, isn't it?  {'café ' if i % 7 == 0 else ''}x = {i * 31}\n" for i in range(400)
    )
    for pattern in FAST.values():
        for stretch in (1, 100, 1024):
            assert Splitter(pattern, stretch).findall(text) == chunks(pattern, text), f"stretch={stretch}"


def test_only_checked_patterns_get_a_twin():
    """GPT-4's pattern keeps ".\\n" together, so its chunks can span a cut: it has no fast path."""
    assert set(ASCII_TWINS) == {GPT2_PATTERN, SMOLLM_PATTERN}
    assert Splitter(GPT4_PATTERN)._fast is None and Splitter(GPT2_PATTERN)._fast is not None
    text = "end.\n\né"
    assert Splitter(GPT4_PATTERN).findall(text) == chunks(GPT4_PATTERN, text) == ["end", ".\n\n", "é"]


@pytest.mark.parametrize("stretch", [0, -3, 1.5, True])
def test_bad_stretch_is_a_value_error(stretch):
    with pytest.raises(ValueError, match="stretch must be an int >= 1"):
        Splitter(GPT2_PATTERN, stretch)
