"""Hidden suite of the toy kata (the runner's own tests grade against it)."""

import pytest

KATA = "toy"


@pytest.mark.example
@pytest.mark.points(1)
def test_add_example(kata):
    """add(2, 3) is 5"""
    got = kata.add(2, 3)
    assert got == 5, f"add(2, 3): got {got}, want 5"


@pytest.mark.points(2)
def test_add_negative(kata):
    """add works for negative numbers"""
    got = kata.add(-2, -3)
    assert got == -5, f"add(-2, -3): got {got}, want -5"


@pytest.mark.example
@pytest.mark.points(1)
def test_count_words_example(kata):
    """count_words counts repeated words"""
    got = kata.count_words("the cat the")
    assert got == {"the": 2, "cat": 1}, f"count_words('the cat the'): got {got}, want {{'the': 2, 'cat': 1}}"


@pytest.mark.points(2)
@pytest.mark.builds_on("test_count_words_example")
def test_count_words_whitespace(kata):
    """count_words splits on any run of whitespace"""
    got = kata.count_words("a  b\n")
    assert got == {"a": 1, "b": 1}, f"count_words('a  b\\n'): got {got}, want {{'a': 1, 'b': 1}}"
