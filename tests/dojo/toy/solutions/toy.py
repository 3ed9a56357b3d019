"""Toy kata reference."""


def add(a: int, b: int) -> int:
    """a + b."""
    return a + b


def count_words(text: str) -> dict[str, int]:
    """How often each whitespace-separated word occurs."""
    counts: dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
