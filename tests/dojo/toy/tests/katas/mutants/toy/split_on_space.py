"""Splits on single spaces: "a  b" gets an empty word."""


def add(a: int, b: int) -> int:
    return a + b


def count_words(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in text.split(" "):
        counts[word] = counts.get(word, 0) + 1
    return counts
