"""Toy kata stub: add two numbers, count words."""


def add(a: int, b: int) -> int:
    """a + b."""
    raise NotImplementedError


def count_words(text: str) -> dict[str, int]:
    """How often each whitespace-separated word occurs."""
    raise NotImplementedError
