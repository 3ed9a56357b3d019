"""What a graded failure says when a test wanted an exception: a stub's is work not written yet."""

from __future__ import annotations

import pytest

from dojo.testing import expect_raises, expect_value_error


def stub():
    raise NotImplementedError


def test_a_stub_is_not_written_yet():
    """a bare NotImplementedError reads "not written yet (NotImplementedError), want ValueError", not "raised NotImplementedError: ," """
    with pytest.raises(pytest.fail.Exception) as info:
        expect_value_error(stub, "f(-1)")
    assert str(info.value.msg) == "f(-1): not written yet (NotImplementedError), want ValueError"


def test_a_named_stub_is_not_written_yet_either():
    """a NotImplementedError with a message (bpe's stubs name the method) is still "not written yet" """
    def named():
        raise NotImplementedError("BPETokenizer.load")

    with pytest.raises(pytest.fail.Exception) as info:
        expect_raises(KeyError, named, "load('x')")
    assert str(info.value.msg) == "load('x'): not written yet (NotImplementedError), want KeyError"


def test_a_wrong_exception_and_no_exception_say_what_happened():
    """another exception is named with its message (or alone when it has none); no exception says so"""
    def typed():
        raise TypeError("bad type")

    def bare():
        raise RuntimeError

    for fn, want in ((typed, "f: raised TypeError: bad type, want ValueError"),
                     (bare, "f: raised RuntimeError, want ValueError"),
                     (lambda: None, "f: raised nothing, want ValueError")):
        with pytest.raises(pytest.fail.Exception) as info:
            expect_value_error(fn, "f")
        assert str(info.value.msg) == want


def test_the_wanted_exception_is_returned():
    """the wanted exception comes back, so the test can read its message"""
    def bad():
        raise ValueError("line 4: bad merge")

    assert str(expect_value_error(bad, "load")) == "line 4: bad merge"
