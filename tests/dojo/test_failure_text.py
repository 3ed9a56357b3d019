"""What a graded failure says when a test wanted an exception: a stub's is work not written yet."""

from __future__ import annotations

import builtins

import pytest

from dojo.testing import expect_raises, expect_value_error


def stub():
    raise NotImplementedError


def test_a_stub_is_not_written_yet():
    """a bare NotImplementedError reads "not written yet (NotImplementedError at FILE:LINE, in f), want
    ValueError", naming where it was raised, not "raised NotImplementedError: ," """
    with pytest.raises(pytest.fail.Exception) as info:
        expect_value_error(stub, "f(-1)")
    line = stub.__code__.co_firstlineno + 1
    assert str(info.value.msg) == (
        f"f(-1): not written yet (NotImplementedError at test_failure_text.py:{line}, in stub), want ValueError"
    )


def test_a_named_stub_is_not_written_yet_either():
    """a NotImplementedError with a message (bpe's stubs name the method) is still "not written yet", and
    a method is named with its class"""

    class BPETokenizer:
        def load(self):
            raise NotImplementedError("BPETokenizer.load")

    with pytest.raises(pytest.fail.Exception) as info:
        expect_raises(KeyError, BPETokenizer().load, "load('x')")
    assert str(info.value.msg).startswith(
        "load('x'): not written yet (NotImplementedError at test_failure_text.py:"
    )
    assert str(info.value.msg).endswith(
        ", in test_a_named_stub_is_not_written_yet_either.<locals>.BPETokenizer.load), want KeyError"
    )


def test_a_librarys_not_implemented_error_is_no_stub():
    """a NotImplementedError in a library's own words (torch's for an op a dtype lacks) is a real failure:
    named with its message, never "not written yet", both when a test wanted an error and when none"""

    def half():
        raise NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Half'")

    with pytest.raises(pytest.fail.Exception) as info:
        expect_value_error(half, "linear(x)")
    assert str(info.value.msg) == (
        "linear(x): raised NotImplementedError: \"addmm_impl_cpu_\" not implemented for 'Half', want ValueError"
    )
    message = _message(NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Half'"), [])
    assert message.startswith('NotImplementedError: "addmm_impl_cpu_" not implemented'), message
    assert "not written yet" in _message(NotImplementedError("Cache.update"), [])


def test_a_wrong_exception_and_no_exception_say_what_happened():
    """another exception is named with its message (or alone when it has none); no exception says so"""

    def typed():
        raise TypeError("bad type")

    def bare():
        raise RuntimeError

    for fn, want in (
        (typed, "f: raised TypeError: bad type, want ValueError"),
        (bare, "f: raised RuntimeError, want ValueError"),
        (lambda: None, "f: raised nothing, want ValueError"),
    ):
        with pytest.raises(pytest.fail.Exception) as info:
            expect_value_error(fn, "f")
        assert str(info.value.msg) == want


def test_the_wanted_exception_is_returned():
    """the wanted exception comes back, so the test can read its message"""

    def bad():
        raise ValueError("line 4: bad merge")

    assert str(expect_value_error(bad, "load")) == "line 4: bad merge"


# ---- hypothesis's notes, in the kata's terms -------------------------------------------------------


def _message(exc: BaseException, notes: list[str]) -> str:
    from dojo.grading.suite.failures import failure_message

    for note in notes:
        exc.add_note(note)
    try:
        raise exc
    except BaseException:  # noqa: BLE001
        return failure_message(pytest.ExceptionInfo.from_current(), None)


def test_falsifying_example_is_the_arguments_without_hypothesis_chatter():
    """hypothesis's banner, its "Explanation" and the paths of the grader's temporary copy are left out;
    the failing input stays, as the arguments (the kata module and st.data() left out, draws kept)"""
    message = _message(
        AssertionError("encode('ab'): got [1], want [2]"),
        [
            "Failing test case: test_encode_replays_training(\n    kata=<module 'dojo_target_bpe' from '/tmp/ws/bpe.py'>,\n"
            "    train_text='ab',\n    data=data(...),\n)",
            "Draw 1: 'xyz'",
            "Explanation:",
            "    These lines were always and only run by failing test cases:",
            "        /tmp/dojo-grade-bpe-k2j3/grading/tests/katas/test_bpe.py:86",
            "You can reproduce this example by temporarily adding @reproduce_failure('6.1', b'AXic') as a decorator",
        ],
    )
    assert message == "encode('ab'): got [1], want [2]\nfailing input: train_text='ab'\nthen drew 'xyz'"


def test_an_example_where_any_value_fails_says_so():
    """every argument "# or any other generated value": the input does not matter, and the report says that"""
    message = _message(
        NotImplementedError(),
        [
            "Failing test case: test_round_trip_any_text(\n"
            "    # The test always failed when commented parts were varied together.\n"
            "    text='',  # or any other generated value\n"
            "    use_pattern=False,  # or any other generated value\n)"
        ],
    )
    assert message.endswith("\nfails for any input")
    assert "Failing test case" not in message and "generated value" not in message


def test_older_hypothesis_banner_and_long_values():
    """ "Falsifying example:" (older hypothesis) reads the same; a value hypothesis spread over lines is one argument"""
    message = _message(
        AssertionError("decode: wrong"),
        ["Falsifying example: test_decode_any_ids(\n    ids=[1,\n     2,\n     3],\n    threshold=2,\n)"],
    )
    assert message == "decode: wrong\nfailing input: ids=[1, 2, 3], threshold=2"


def test_several_distinct_failures_show_the_first_and_count_the_rest():
    """hypothesis's group of distinct failures reads as the first one, in kata terms, and how many more"""
    group = getattr(builtins, "ExceptionGroup", None) or pytest.importorskip("exceptiongroup").ExceptionGroup
    raised = []
    for exc in (AssertionError("decode([300]): want ValueError"), ValueError("x")):
        try:
            raise exc
        except Exception as caught:  # noqa: BLE001 (a raised exception carries its traceback, as hypothesis's do)
            raised.append(caught)
    raised[0].add_note("Failing test case: test_decode(\n    ids=[300],\n)")
    message = _message(group("Hypothesis found 2 distinct failures.", raised), [])
    assert (
        message
        == "decode([300]): want ValueError\nfailing input: ids=[300]\n(and 1 more distinct failure(s) of this property)"
    )


@pytest.mark.parametrize("content, line", [("bpe v1\npatern null\n", 2)])
@pytest.mark.parametrize("dtype", ["float16"])
def test_case_label_is_readable(request, content, line, dtype):
    """a parametrised test's case reads as words: a short text as itself, anything else as name=value, never the
    raw pytest id with its escapes and dashes"""
    from dojo.grading.suite.failures import case_label

    assert case_label(request.node) == "float16, content='bpe v1\\npatern null\\n', line=2"
    assert request.node.name.endswith("]") and "-" in request.node.name  # pytest's own id: what is not shown


@pytest.mark.parametrize("call, name", [("alpha", "alpha"), ("pq", "p|q")])
def test_case_label_says_a_repeated_value_once(request, call, name):
    """a case whose parameters show the same text ("alpha", "alpha") is labelled "alpha", once; different
    texts are both kept"""
    from dojo.grading.suite.failures import case_label

    assert case_label(request.node) == {"alpha": "alpha", "pq": "pq, p|q"}[call]
