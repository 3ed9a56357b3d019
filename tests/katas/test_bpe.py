"""Hidden suite for the bpe kata: a byte-level BPE tokenizer with train, encode, decode, save, load.

The oracle is written plainly below: training recounts every pair of every chunk before each merge,
and encoding replays the merges in training order. Randomised texts come from hypothesis with a
bounded number of examples; hand-picked cases pin the contract's edges (overlaps, threshold,
ties, chunk boundaries, special tokens, file format).
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter

import pytest
import regex
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from dojo import seeds
from dojo.testing import banned_uses, expect_raises

KATA = "bpe"

GPT2 = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4 = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)
EOT = "<|endoftext|>"
SETTINGS = seeds.hypothesis_settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Small alphabets make repeated pairs (and so merges) likely; the unicode ones cover 2-4 byte UTF-8.
texts = st.text(alphabet=st.sampled_from("aab ba\n1é漢😀'"), max_size=60)
any_text = st.text(max_size=40)  # any code point, surrogates excluded by hypothesis


# --------------------------------------------------------------------------- the oracle


def oracle_merge(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    """Replace each occurrence of pair, left to right, without overlap."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def oracle_chunks(text: str, pattern: str | None) -> list[list[int]]:
    pieces = regex.findall(pattern, text) if pattern else [text]
    return [list(p.encode("utf-8")) for p in pieces]


def oracle_train(
    text: str, threshold: int = 2, max_merges: int | None = None, pattern: str | None = None
) -> dict[tuple[int, int], int]:
    """Recount every adjacent pair of every chunk before each merge (slow, obviously right)."""
    chunks = oracle_chunks(text, pattern)
    merges: dict[tuple[int, int], int] = {}
    while max_merges is None or len(merges) < max_merges:
        counts = Counter()
        for ids in chunks:
            counts.update(zip(ids, ids[1:]))
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))  # most frequent, then smallest pair
        if counts[pair] < threshold:
            break
        merges[pair] = 256 + len(merges)
        chunks = [oracle_merge(ids, pair, merges[pair]) for ids in chunks]
    return merges


def oracle_encode(
    text: str, merges: dict, pattern: str | None = None, specials: dict | None = None
) -> list[int]:
    """Cut out special tokens (longest first), split into chunks, replay the merges in order."""
    specials = specials or {}
    parts = [text]
    if specials:
        alternation = "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))
        parts = re.split(f"({alternation})", text)
    out = []
    for n, part in enumerate(parts):
        if n % 2:
            out.append(specials[part])
            continue
        for ids in oracle_chunks(part, pattern) if part else []:
            for pair, new in merges.items():
                ids = oracle_merge(ids, pair, new)
            out += ids
    return out


def oracle_vocab(merges: dict) -> dict[int, bytes]:
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new in merges.items():
        vocab[new] = vocab[a] + vocab[b]
    return vocab


# --------------------------------------------------------------------------- helpers


def trained(kata, text: str, threshold: int = 2, max_merges: int | None = None, pattern=None, specials=None):
    tok = kata.BPETokenizer(pattern=pattern, special_tokens=specials)
    tok.train(text, threshold=threshold, max_merges=max_merges)
    return tok


def show(merges: dict) -> str:
    """Merges as readable byte strings: {(b'a', b'a'): 256, ...}."""
    vocab = oracle_vocab(merges) if all(v >= 256 for v in merges.values()) else {}
    return (
        "{"
        + ", ".join(f"({vocab.get(a, a)!r}, {vocab.get(b, b)!r}): {n}" for (a, b), n in merges.items())
        + "}"
    )


def raises(exc_type, fn, what: str) -> str:
    """Call fn, demand exc_type, return its message."""
    return str(expect_raises(exc_type, fn, what))


def letters(r, k: int) -> list[str]:
    """k distinct lowercase ASCII letters, drawn with r."""
    return r.sample(string.ascii_lowercase, k)


def random_text(r, size: int, alphabet: str = "abcab \n1é漢😀'.") -> str:
    """size characters of a small alphabet (1-4 byte UTF-8), so pairs repeat and merges happen."""
    return "".join(r.choice(alphabet) for _ in range(size))


def random_words(r, count: int, alphabet: str) -> str:
    """count space-separated words of 1-5 characters of alphabet."""
    return " ".join("".join(r.choice(alphabet) for _ in range(r.randint(1, 5))) for _ in range(count))


# --------------------------------------------------------------------------- README examples (decode, special tokens)


@pytest.mark.example
def test_readme_decode_example(kata):
    """decode replaces invalid UTF-8 with U+FFFD and rejects unknown ids"""
    tok = kata.BPETokenizer()
    got = tok.decode([104, 0xFF, 105])
    assert got == "h\ufffdi", f"decode([104, 255, 105]): got {got!r}, want 'h\\ufffdi'"
    msg = raises(ValueError, lambda: tok.decode([104, 999]), "decode([104, 999]) on an untrained tokenizer")
    assert "999" in msg, f"the error for an unknown id should name it (999), got {msg!r}"


@pytest.mark.example
def test_readme_special_tokens_example(kata):
    """special tokens are kept whole and decode to their text"""
    tok = kata.BPETokenizer(special_tokens={EOT: 300})
    got = tok.encode(f"hi{EOT}")
    assert got == [104, 105, 300], (
        f"encode('hi<|endoftext|>') with <|endoftext|> = 300: got {got}, want [104, 105, 300]"
    )
    got = tok.decode([104, 105, 300])
    assert got == f"hi{EOT}", f"decode([104, 105, 300]): got {got!r}, want 'hi<|endoftext|>'"


@pytest.mark.points(1)
@pytest.mark.builds_on("test_readme_special_tokens_example")
def test_specials_cut_out_before_the_pattern_splits(kata):
    """special tokens are cut out of the text before the split pattern applies, so a pattern never breaks one"""
    r = seeds.rng(1)
    special = r.choice([EOT, "<|im_start|>", "<|im_end|>"])
    sid = r.randint(256, 60000)
    text = "".join(letters(r, r.randint(1, 3))) + special + "".join(letters(r, r.randint(1, 3)))
    tok = kata.BPETokenizer(pattern=GPT2, special_tokens={special: sid})
    got = tok.encode(text)
    want = oracle_encode(text, {}, GPT2, {special: sid})
    assert got == want, (
        f"encode({text!r}) with the GPT-2 pattern and {special} = {sid}: got {got}, "
        f"want {want} (the pattern alone would cut '<|', the name, '|>')"
    )


# --------------------------------------------------------------------------- training: one property at a time


@pytest.mark.points(2)
def test_threshold_is_inclusive(kata):
    """a pair whose count equals the threshold is merged; one below it is not"""
    r = seeds.rng(2)
    x, y = letters(r, 2)
    k = r.randint(3, 6)
    text = r.choice(".,;:!-").join([x + y] * k)  # (x, y) k times, everything else k - 1 times
    want = {(ord(x), ord(y)): 256}
    assert oracle_train(text, threshold=k) == want  # the case is what it claims
    tok = trained(kata, text, threshold=k)
    assert tok.merges == want, (
        f"train({text!r}, threshold={k}): ({x}, {y}) occurs {k} times, got {show(tok.merges)}, want {show(want)}"
    )
    tok = trained(kata, text, threshold=k + 1)
    assert tok.merges == {}, (
        f"train({text!r}, threshold={k + 1}): no pair occurs {k + 1} times, got {show(tok.merges)}, want {{}}"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_threshold_is_inclusive")
def test_overlapping_pairs_counted(kata):
    """pair counts include overlaps: 'aaa' holds (a, a) twice"""
    r = seeds.rng(3)
    a, x = letters(r, 2)
    runs = [[r.randint(3, 7)], [r.randint(3, 7) for _ in range(r.randint(2, 3))]]
    for lengths in runs:  # runs of 3 or more: (a, a) outnumbers every other pair
        text = x.join(a * n for n in lengths)
        count = sum(n - 1 for n in lengths)
        tok = trained(kata, text, threshold=count)
        assert (ord(a), ord(a)) in tok.merges, (
            f"train({text!r}, threshold={count}): ({a}, {a}) occurs {count} times (overlaps count), so it must be merged; got {show(tok.merges)}"
        )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_threshold_is_inclusive")
def test_ties_go_to_smallest_pair(kata):
    """among equally frequent pairs the smallest (left, right) pair is merged first"""
    r = seeds.rng(4)
    distinct = letters(r, r.randint(3, 6))  # every pair once: all tie
    p, q, z = letters(r, 3)
    cases = ["".join(distinct), "".join(sorted(distinct, reverse=True)), f"{z}{p}{z}{p} {q}{p}{q}{p}"]
    for text in cases:
        want = next(iter(oracle_train(text, threshold=1, max_merges=1)))
        tok = trained(kata, text, threshold=1, max_merges=1)
        got = next(iter(tok.merges), None)
        assert got == want, (
            f"train({text!r}, threshold=1, max_merges=1): first merge {got}, want {want} (smallest pair wins a tie)"
        )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_threshold_is_inclusive")
def test_max_merges(kata):
    """training stops after max_merges merges, or earlier when no pair is left"""
    r = seeds.rng(5)
    text = random_words(r, r.randint(6, 10), "".join(letters(r, 6)))
    for n in (0, 1, r.randint(2, 5)):
        got = len(trained(kata, text, threshold=1, max_merges=n).merges)
        assert got == n, f"train({text!r}, threshold=1, max_merges={n}): made {got} merges, want {n}"
    short = "".join(letters(r, r.randint(2, 5)))
    limit = r.randint(len(short), 12)
    got = len(trained(kata, short, threshold=1, max_merges=limit).merges)
    assert got == len(short) - 1, (
        f"train({short!r}, threshold=1, max_merges={limit}): made {got} merges, want {len(short) - 1} "
        "(then one token is left)"
    )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_ties_go_to_smallest_pair")
def test_no_merges_across_chunks(kata):
    """with a pattern, no merge joins the end of one chunk to the start of the next"""
    r = seeds.rng(6)
    word, punct = "".join(r.choice("dogcat") for _ in range(r.randint(2, 5))), r.choice(",;.!")
    text = f"{punct} ".join([word] * r.randint(4, 6))  # chunks 'dog', ',', ' dog', ','...
    across = (f"{word[-1]}{punct}".encode(), f"{punct} ".encode())
    tok = trained(kata, text, threshold=2, pattern=GPT2)
    crossing = [tok.vocab[n] for n in tok.merges.values() if any(b in tok.vocab[n] for b in across)]
    assert not crossing, f"train({text!r}, GPT-2 pattern) made tokens across chunk boundaries: {crossing}"
    want = oracle_train(text, threshold=2, pattern=GPT4)
    got = trained(kata, text, threshold=2, pattern=GPT4).merges
    assert got == want, f"train({text!r}, GPT-4 pattern): got {show(got)}, want {show(want)}"


@pytest.mark.points(1)
def test_vocab_holds_merged_bytes(kata):
    """vocab maps 0..255 to single bytes and each merge's id to its two parts' bytes"""
    r = seeds.rng(7)
    word = "".join(r.choice("helowé漢") for _ in range(r.randint(3, 6)))
    tok = trained(kata, " ".join([word] * r.randint(2, 4) + [random_text(r, 8)]), threshold=2)
    for i in (0, r.randint(1, 254), 255):
        assert tok.vocab[i] == bytes([i]), f"vocab[{i}]: got {tok.vocab.get(i)!r}, want {bytes([i])!r}"
    for (a, b), new in tok.merges.items():
        assert tok.vocab[new] == tok.vocab[a] + tok.vocab[b], (
            f"vocab[{new}] should be vocab[{a}] + vocab[{b}]"
        )
    assert len(tok.vocab) == 256 + len(tok.merges), (
        f"vocab size {len(tok.vocab)}, want 256 + {len(tok.merges)} merges"
    )


@pytest.mark.points(1)
def test_training_is_deterministic_and_fresh(kata):
    """training twice on the same text gives the same merges; retraining starts from bytes"""
    r = seeds.rng(8)
    *alphabet, z = letters(r, 6)
    text = random_words(r, r.randint(3, 6), "".join(alphabet))
    tok = trained(kata, text, threshold=2)
    first = list(tok.merges.items())
    again = z * r.randint(4, 5)  # one merge, (z, z), on a letter the first text lacks
    tok.train(again, threshold=2)
    assert tok.merges == {(ord(z), ord(z)): 256}, (
        f"train({again!r}) after another training: got {show(tok.merges)}, want only ({z}, {z}) -> 256"
    )
    tok.train(text, threshold=2)
    assert list(tok.merges.items()) == first, "training on the same text again gave different merges"


@pytest.mark.points(1)
def test_bad_training_arguments(kata):
    """a threshold below 1 or a negative max_merges is a ValueError"""
    r = seeds.rng(9)
    text = random_text(r, r.randint(4, 12))
    tok = kata.BPETokenizer()
    below, negative = -r.randint(1, 10), -r.randint(1, 10)
    raises(ValueError, lambda: tok.train(text, threshold=0), f"train({text!r}, threshold=0)")
    raises(ValueError, lambda: tok.train(text, threshold=below), f"train({text!r}, threshold={below})")
    raises(
        ValueError, lambda: tok.train(text, max_merges=negative), f"train({text!r}, max_merges={negative})"
    )


# --------------------------------------------------------------------------- training as a whole (README examples, the oracle)


@pytest.mark.example
@pytest.mark.builds_on("test_overlapping_pairs_counted")
def test_readme_overlap_example(kata):
    """'aaaaa' holds the pair (a, a) four times, and a merge (in training and encode) replaces it left to right"""
    tok = trained(kata, "aaaaa", threshold=4)
    assert tok.merges == {(97, 97): 256}, (
        f"train('aaaaa', threshold=4): got {show(tok.merges)}, want {{(b'a', b'a'): 256}} (4 overlapping pairs)"
    )
    got = tok.encode("aaaaa")
    assert got == [256, 256, 97], (
        f"encode('aaaaa') with merge aa: got {got}, want [256, 256, 97] (left to right, no overlap)"
    )


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_threshold_is_inclusive",
    "test_overlapping_pairs_counted",
    "test_ties_go_to_smallest_pair",
    "test_readme_overlap_example",
)
def test_readme_training_example(kata):
    """training merges the most frequent pair, overlaps counted, ties to the smallest pair; encode replays the merges"""
    tok = trained(kata, "aaabdaaabac", threshold=2)
    want = {(97, 97): 256, (97, 98): 257, (256, 257): 258}
    assert dict(tok.merges) == want, (
        f"train('aaabdaaabac', threshold=2): got {show(tok.merges)}, want {show(want)}"
    )
    assert list(tok.merges) == list(want), f"merges must be in training order: got {list(tok.merges)}"
    got = tok.encode("aaabdaaabac")
    assert got == [258, 100, 258, 97, 99], (
        f"encode('aaabdaaabac') after training on it: got {got}, want [258, 100, 258, 97, 99]"
    )
    assert tok.vocab[258] == b"aaab", (
        f"vocab[258] should be b'aaab' (b'aa' + b'ab'), got {tok.vocab.get(258)!r}"
    )


@pytest.mark.example
@pytest.mark.builds_on(
    "test_no_merges_across_chunks",
    "test_specials_cut_out_before_the_pattern_splits",
    "test_threshold_is_inclusive",
)
def test_readme_pattern_example(kata):
    """with a split pattern, pairs never cross a chunk boundary, in training and in encode"""
    tok = trained(kata, "ab ab ab", threshold=2, pattern=GPT2)
    want = {(97, 98): 256, (32, 256): 257}
    assert tok.merges == want, (
        f"train('ab ab ab', GPT-2 pattern): got {show(tok.merges)}, want {show(want)} (chunks 'ab', ' ab', ' ab')"
    )
    got = tok.encode("ab ab")
    assert got == [256, 257], f"encode('ab ab'): got {got}, want [256, 257]"


@pytest.mark.points(3)
@SETTINGS
@given(text=texts, threshold=st.integers(1, 3), use_pattern=st.booleans())
@pytest.mark.builds_on(
    "test_threshold_is_inclusive",
    "test_overlapping_pairs_counted",
    "test_ties_go_to_smallest_pair",
    "test_no_merges_across_chunks",
)
def test_training_matches_oracle(kata, text, threshold, use_pattern):
    """training gives the same merges, in the same order, as recounting before every merge"""
    pattern = GPT2 if use_pattern else None
    got = trained(kata, text, threshold=threshold, pattern=pattern).merges
    want = oracle_train(text, threshold=threshold, pattern=pattern)
    assert list(got.items()) == list(want.items()), (
        f"train({text!r}, threshold={threshold}, pattern={'GPT-2' if use_pattern else None}): "
        f"got {show(got)}, want {show(want)}"
    )


# --------------------------------------------------------------------------- encoding and decoding


@pytest.mark.points(3)
@SETTINGS
@given(train_text=texts, text=texts, use_pattern=st.booleans())
@pytest.mark.builds_on(
    "test_threshold_is_inclusive",
    "test_ties_go_to_smallest_pair",
    "test_no_merges_across_chunks",
    "test_specials_cut_out_before_the_pattern_splits",
)
def test_encode_replays_training(kata, train_text, text, use_pattern):
    """encode applies merges by rank: the same tokens as replaying training's merges in order"""
    pattern = GPT2 if use_pattern else None
    tok = trained(kata, train_text, threshold=1, pattern=pattern)
    merges = oracle_train(train_text, threshold=1, pattern=pattern)
    for sample in (train_text, text):
        got, want = tok.encode(sample), oracle_encode(sample, merges, pattern)
        assert got == want, (
            f"encode({sample!r}) after train({train_text!r}, threshold=1): got {got}, want {want}"
        )


@pytest.mark.points(1)
@pytest.mark.builds_on(
    "test_threshold_is_inclusive",
    "test_overlapping_pairs_counted",
    "test_ties_go_to_smallest_pair",
    "test_readme_overlap_example",
)
def test_encode_long_chunk(kata):
    """a long chunk (no pattern) encodes like replaying training's merges"""
    r = seeds.rng(10)
    word = "".join(r.choice("abrcd") for _ in range(r.randint(8, 12)))
    # x, y, z, u, w: merging (x, y) (7 times) drops (y, z) from 6 to 3, below (u, w) (4): the counts
    # training goes by change as it merges. One-off capitals keep the pieces apart.
    x, y, z, u, w = r.sample("efghijklmnopqstuvwxyz", 5)
    pieces = [x + y + z] * 3 + [y + z] * 3 + [x + y] * 4 + [u + w] * 4
    r.shuffle(pieces)
    joined = "".join(p + sep for p, sep in zip(pieces, r.sample(string.ascii_uppercase, len(pieces))))
    train_text = f"{word} " * 6 + (random_text(r, 20) + " ") * 3 + joined
    tok = trained(kata, train_text, threshold=2)
    merges = oracle_train(train_text, threshold=2)
    for text in (train_text, r.choice("ab") * r.randint(150, 250), word * 9 + random_text(r, 120)):
        got, want = tok.encode(text), oracle_encode(text, merges)
        assert got == want, (
            f"encode of a {len(text)}-character chunk starting {text[:30]!r} disagrees with replaying the merges"
        )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_threshold_is_inclusive", "test_ties_go_to_smallest_pair")
def test_encode_by_rank_not_longest_match(kata):
    """encode merges the earliest-learned pair first, not the longest vocabulary match"""
    r = seeds.rng(11)
    a, b, c, x = letters(r, 4)
    if a > x:  # so that (a, b) wins the tie with (x, a) and (bc, bc)
        a, x = x, a
    text = f"{b}{c}" * 3 + f"{x}{a}{b}" * 2  # learns bc (256), then ab (257)
    want = {(ord(b), ord(c)): 256, (ord(a), ord(b)): 257}
    assert oracle_train(text, threshold=2, max_merges=2) == want  # the case is what it claims
    tok = trained(kata, text, threshold=2, max_merges=2)
    assert tok.merges == want, f"train({text!r}, max_merges=2): got {show(tok.merges)}"
    got = tok.encode(a + b + c)
    assert got == [ord(a), 256], (
        f"encode({a + b + c!r}) after learning {b}{c} before {a}{b}: got {got}, want {[ord(a), 256]} ({a}, {b}{c})"
    )


@pytest.mark.points(2)
@SETTINGS
@given(text=any_text, use_pattern=st.booleans())
@pytest.mark.builds_on("test_specials_cut_out_before_the_pattern_splits")
def test_round_trip_any_text(kata, text, use_pattern):
    """decode(encode(text)) == text for any unicode text"""
    tok = trained(
        kata,
        "Hello wörld 漢字 😀 1234 \t\n" * 3 + "the theme then them",
        threshold=2,
        pattern=GPT4 if use_pattern else None,
    )
    got = tok.decode(tok.encode(text))
    assert got == text, f"decode(encode({text!r})) gave {got!r}"


@pytest.mark.points(2)
@SETTINGS
@given(data=st.binary(max_size=40))
@pytest.mark.builds_on("test_readme_decode_example")
def test_decode_any_ids(kata, data):
    """decode of any ids is their bytes decoded as UTF-8 with replacement"""
    tok = trained(kata, "aaab aaab ééé", threshold=2)
    vocab = oracle_vocab(tok.merges)
    ids = list(data) + [max(vocab)] if data and data[0] % 2 else list(data)
    want = b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
    got = tok.decode(ids)
    assert got == want, f"decode({ids}): got {got!r}, want {want!r}"


@pytest.mark.points(1)
def test_empty_string(kata):
    """the empty string encodes to no ids, decodes from none, and trains no merges"""
    r = seeds.rng(12)
    tok = trained(kata, "", threshold=r.randint(1, 5), pattern=r.choice([None, GPT2, GPT4]))
    assert tok.merges == {}, f"train(''): got {show(tok.merges)}, want {{}}"
    assert tok.encode("") == [], f"encode(''): got {tok.encode('')}, want []"
    assert tok.decode([]) == "", f"decode([]): got {tok.decode([])!r}, want ''"


@pytest.mark.points(1)
def test_unknown_ids(kata):
    """decode raises ValueError naming an id that is neither a token nor a special token"""
    r = seeds.rng(13)
    a, special = r.choice(string.ascii_letters), r.randint(300, 5000)
    tok = trained(kata, a * r.randint(4, 5), threshold=2, specials={EOT: special})  # one merge: 256
    for bad in (257, r.randint(258, special - 1), special + r.randint(1, 1000), -r.randint(1, 50)):
        msg = raises(
            ValueError,
            lambda bad=bad: tok.decode([ord(a), bad]),
            f"decode([{ord(a)}, {bad}]) with tokens 0..256 and special {special}",
        )
        assert str(bad) in msg, f"the error for unknown id {bad} should name it, got {msg!r}"


# --------------------------------------------------------------------------- special tokens


@pytest.mark.points(2)
@SETTINGS
@given(
    pieces=st.lists(
        st.sampled_from(["a", "ab", " ", "<|", "|>", EOT, "<|im_start|>", "<|im_end|>", "é"]), max_size=12
    )
)
@pytest.mark.builds_on("test_ties_go_to_smallest_pair", "test_specials_cut_out_before_the_pattern_splits")
def test_special_tokens_never_broken(kata, pieces):
    """special tokens are matched before splitting and never broken, around any text"""
    specials = {EOT: 1000, "<|im_start|>": 1001, "<|im_end|>": 1002}
    tok = trained(kata, "ab ab <|ab|> <|<| |>|>", threshold=2, pattern=GPT2, specials=specials)
    text = "".join(pieces)
    want = oracle_encode(
        text, oracle_train("ab ab <|ab|> <|<| |>|>", threshold=2, pattern=GPT2), GPT2, specials
    )
    got = tok.encode(text)
    assert got == want, f"encode({text!r}) with special tokens {list(specials)}: got {got}, want {want}"
    assert tok.decode(got) == text, f"decode(encode({text!r})) gave {tok.decode(got)!r}"


@pytest.mark.points(1)
def test_longest_special_token_wins(kata):
    """when two special tokens start at the same place, the longer one is matched"""
    r = seeds.rng(14)
    a, x, *name = letters(r, r.randint(3, 5))
    short = f"<{''.join(name)}>"
    ids = r.sample(range(256, 5000), 2)
    pairs = [(short, ids[0]), (short + x, ids[1])]
    r.shuffle(pairs)  # listed in either order
    specials = dict(pairs)
    text = f"{a}{short}{x}{short}"
    got = kata.BPETokenizer(special_tokens=specials).encode(text)
    want = oracle_encode(text, {}, None, specials)
    assert got == want, (
        f"encode({text!r}) with {short} = {specials[short]} and {short + x} = {specials[short + x]}: "
        f"got {got}, want {want}"
    )


@pytest.mark.points(1)
def test_special_id_collisions(kata):
    """a special token whose id is already a vocabulary id is a ValueError"""
    r = seeds.rng(15)
    byte, taken = r.randrange(256), r.randint(256, 5000)
    raises(
        ValueError,
        lambda: kata.BPETokenizer(special_tokens={EOT: byte}),
        f"special token with id {byte} (the byte {bytes([byte])!r})",
    )
    raises(
        ValueError,
        lambda: kata.BPETokenizer(special_tokens={EOT: taken, "<x>": taken}),
        f"two special tokens with id {taken}",
    )
    text = " ".join(c * r.randint(4, 5) for c in letters(r, r.randint(2, 4)))  # one merge per letter
    made = len(oracle_train(text, threshold=2))
    clash = 256 + r.randrange(made)
    tok = kata.BPETokenizer(special_tokens={EOT: clash})
    raises(
        ValueError,
        lambda: tok.train(text, threshold=2),
        f"training {made} merges (ids 256..{255 + made}) with a special token at {clash}",
    )


# --------------------------------------------------------------------------- save and load


@pytest.mark.points(2)
@pytest.mark.builds_on("test_specials_cut_out_before_the_pattern_splits")
def test_save_load_round_trip(kata, kata_dir):
    """load(save(t)) has the same pattern, special tokens, merges and vocab, and encodes alike"""
    r = seeds.rng(17)
    quoted, name = "".join(letters(r, 5)), " ".join(letters(r, 2)) + r.choice(["", "é", "漢"])
    pattern = GPT2 + f'|"{quoted}"|\\n'
    other = f"<|{name}|>"
    ids = r.sample(range(1000, 5000), 2)
    text = random_words(r, r.randint(6, 10), "thecasoné12") + f" '{quoted}'"
    tok = trained(kata, text * 2, threshold=2, pattern=pattern, specials={EOT: ids[0], other: ids[1]})
    path = kata_dir.path("tok.bpe")
    tok.save(path)
    back = kata.BPETokenizer.load(path)
    assert back.pattern == pattern, f"pattern after save/load: got {back.pattern!r}, want {pattern!r}"
    assert back.special_tokens == tok.special_tokens, (
        f"special tokens after save/load: got {back.special_tokens}"
    )
    assert list(back.merges.items()) == list(tok.merges.items()), (
        "merges (or their order) changed through save/load"
    )
    assert back.vocab == tok.vocab, "vocab changed through save/load"
    text = random_words(r, 3, "thecasoné12") + EOT + random_words(r, 2, "thecasoné12") + other
    assert back.encode(text) == tok.encode(text), f"encode({text!r}) differs after save/load"
    plain = kata.BPETokenizer()
    plain.save(kata_dir.path("plain.bpe"))
    back = kata.BPETokenizer.load(kata_dir.path("plain.bpe"))
    assert back.pattern is None and back.merges == {} and back.special_tokens == {}, (
        "an untrained tokenizer without pattern did not round-trip"
    )


@pytest.mark.example
@pytest.mark.points(1)
def test_readme_file_format_example(kata, kata_dir):
    """load reads the documented text format"""
    kata_dir.write_text(
        "hand.bpe", 'bpe v1\npattern null\nspecial 300 "<|endoftext|>"\nmerge 97 97\nmerge 256 98\n'
    )
    tok = kata.BPETokenizer.load(kata_dir.path("hand.bpe"))
    assert tok.merges == {(97, 97): 256, (256, 98): 257}, (
        f"merges read from the README's file: got {tok.merges}"
    )
    got = tok.encode("aabaa<|endoftext|>")
    assert got == [257, 256, 300], (
        f"encode('aabaa<|endoftext|>') with the README's file: got {got}, want [257, 256, 300]"
    )


MALFORMED = [
    "version",  # bpe v2
    "pattern_key",  # patern null
    "pattern_unclosed",  # pattern "(unclosed"
    "special_not_json",  # special 300 <|endoftext|>
    "merge_not_int",  # merge 97 x
    "merge_unknown_id",  # merge 97 300 before id 300 exists
    "merge_one_id",  # merge 97
    "blank_lines",  # blank lines count in the numbering
]


def malformed(r, case: str) -> tuple[str, int]:
    """A file with one bad line, of the kind `case` names, drawn with r: (its text, the bad line's number)."""
    word = "".join(letters(r, r.randint(1, 6)))
    head = ["bpe v1", "pattern null"]
    if case == "version":
        head[0] = f"bpe v{r.randint(2, 9)}"
    elif case == "pattern_key":
        cut = r.randrange(len("pattern"))
        head[1] = f"{'pattern'[:cut] + 'pattern'[cut + 1 :]} null"
    elif case == "pattern_unclosed":
        head[1] = f"pattern {json.dumps(r.choice(['(', '[', '(?:']) + word)}"
    if case == "special_not_json":
        ids = r.sample(range(1000, 5000), 4)
        body = [f"special {i} {json.dumps(f'<|{word}{n}|>')}" for n, i in enumerate(ids[: r.randint(0, 3)])]
        body.append(f"special {ids[-1]} <|{word}|>")
    else:  # merges that are fine (the i-th may use ids below 256 + i), then maybe a bad one
        body = [f"merge {r.randrange(256 + i)} {r.randrange(256 + i)}" for i in range(r.randint(1, 4))]
        a = r.randrange(256 + len(body))
        bad = {
            "merge_not_int": f"merge {a} {word}",
            "merge_unknown_id": f"merge {a} {256 + len(body) + r.randint(0, 50)}",
            "merge_one_id": f"merge {a}",
            "blank_lines": f"merge {a} {word}",
        }
        body += [bad[case]] if case in bad else []
    in_head = case in ("version", "pattern_key", "pattern_unclosed")
    for _ in range(r.randint(2, 4) if case == "blank_lines" else r.randint(0, 2)):
        # a blank line (empty or whitespace) anywhere after line 2, before a bad last line
        body.insert(r.randint(0, len(body) - (not in_head)), r.choice(["", "  ", "\t"]))
    line = {"version": 1, "pattern_key": 2, "pattern_unclosed": 2}.get(case, 2 + len(body))
    return "\n".join(head + body) + "\n", line


@pytest.mark.points(2)
@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_file(kata, kata_dir, case):
    """load raises ValueError naming the line of a malformed file"""
    content, line = malformed(seeds.rng(20 + MALFORMED.index(case)), case)
    kata_dir.write_text("bad.bpe", content)
    path = kata_dir.path("bad.bpe")
    msg = raises(
        ValueError,
        lambda: kata.BPETokenizer.load(path),
        f"load of a file with a bad line {line}: {content!r}",
    )
    assert re.search(rf"\bline {line}\b", msg), (
        f"load of {content!r}: the error should name line {line}, got {msg!r}"
    )


# --------------------------------------------------------------------------- shortcuts


@pytest.mark.points(1)
@pytest.mark.builds_on(
    "test_threshold_is_inclusive",
    "test_overlapping_pairs_counted",
    "test_readme_overlap_example",
)
def test_no_tokenizer_libraries(kata, kata_path):
    """works without tiktoken, tokenizers, sentencepiece or transformers"""
    r = seeds.rng(16)
    a, b = letters(r, 2)
    text = a * r.randint(3, 4) + b
    tok = trained(kata, text, threshold=2)
    got, want = tok.encode(text), oracle_encode(text, oracle_train(text, threshold=2))
    assert got == want, f"encode({text!r}) after training on it: got {got}, want {want}"
    found = banned_uses(kata_path, {"tiktoken", "tokenizers", "sentencepiece", "transformers"})
    assert not found, f"the tokenizer must be written by hand; found {found}"
