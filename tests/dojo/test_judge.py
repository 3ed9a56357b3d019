"""Judge mode, attacked the ways a candidate who has read this repository did: each route scores nothing
or is flagged, and the honest reference still gets full marks with no finding.

Gradings of the toy kata go through dojo.grading.grade with sandboxed=True (judge mode's default);
the wire format's refusals are tested directly. Where bwrap cannot run, the grading tests skip with
the reason, unless DOJO_REQUIRE_SANDBOX=1 (set by .ci/run), where they fail.
"""

from __future__ import annotations

import base64
import os
import socket
import zlib
from typing import NamedTuple

import pytest
import torch

from dojo import catalog
from dojo.grading import grade
from dojo.grading.judging import remote, wire


def submit(toy, source: str) -> grade.GradeResult:
    folder = toy.toy.parent / "submission"
    folder.mkdir(exist_ok=True)
    (folder / "toy.py").write_text(source)
    return grade.grade("toy", str(folder), sandboxed=True, timeout=60)


def outcome(result: grade.GradeResult, prop: str) -> tuple[str, str]:
    test = next(t for t in result.tests if t.property == prop)
    return test.outcome, test.message


ADD, COUNT = "add(2, 3) is 5", "count_words counts repeated words"


def test_the_reference_is_judged_with_full_marks_and_no_finding(toy):
    """the toy reference in judge mode: every point, no integrity finding, and the report says judged"""
    result = submit(toy, toy.reference.read_text())
    assert result.passed and result.points == result.total and not result.integrity, result.to_json()
    assert result.judged and result.to_json()["judged"] is True


def test_patching_the_runner_from_the_candidate_does_nothing(toy):
    """reaching pytest or the plugin through sys.modules under an alias: they are not in the worker"""
    result = submit(
        toy,
        (
            "import sys\nm = sys.modules\nfor name in [n for n in m if 'pytest' in n or n.startswith('dojo')]:\n"
            "    try:\n        vars(m[name])['runtest'] = lambda *a, **k: None\n    except Exception:\n        pass\n"
            "def add(a, b):\n    raise NotImplementedError\n"
            "def count_words(text):\n    raise NotImplementedError\n"
        ),
    )
    assert result.points == 0 and all(t.outcome == "failed" for t in result.tests), result.to_json()


@pytest.mark.parametrize(
    "raise_it",
    [
        "import unittest\n    raise unittest.SkipTest('later')",
        "raise next(c for c in BaseException.__subclasses__() if c.__name__ == 'BaseException')('x')",
        "import pytest\n    pytest.skip('later')",
    ],
)
def test_skips_and_outcomes_raised_by_the_candidate_fail(toy, raise_it):
    """SkipTest, pytest.skip or any BaseException from the candidate's code: a failure naming it"""
    result = submit(toy, f"def add(a, b):\n    {raise_it}\ndef count_words(text):\n    {raise_it}\n")
    verdict, message = outcome(result, ADD)
    assert verdict == "failed" and result.points == 0, result.to_json()
    assert not result.inconclusive, "a skip from the candidate's code was taken as inconclusive"


def test_values_with_their_own_equality_are_rebuilt_as_plain_data(toy):
    """a dict whose __eq__ is always True, an int subclass equal to anything: compared as plain values"""
    result = submit(
        toy,
        (
            "class Yes(dict):\n    def __eq__(self, other):\n        return True\n"
            "class Five(int):\n    def __eq__(self, other):\n        return True\n"
            "def add(a, b):\n    return Five(0)\n"
            "def count_words(text):\n    return Yes()\n"
        ),
    )
    assert outcome(result, ADD)[0] == "failed" and outcome(result, COUNT)[0] == "failed", result.to_json()


def test_patching_comparisons_in_the_candidate_process_does_not_reach_the_judge(toy):
    """builtins and operator patched in the worker: the judge's own comparisons are untouched"""
    result = submit(
        toy,
        (
            "import builtins, operator\nbuiltins.isinstance = lambda *a: True\noperator.eq = lambda *a: True\n"
            "def add(a, b):\n    return 0\n"
            "def count_words(text):\n    return {}\n"
        ),
    )
    assert result.points == 0, result.to_json()


def test_hidden_code_run_by_exec_is_refused_and_flagged(toy):
    """the reference as zlib+base85 run through getattr(len.__self__, 'ex' + 'ec'): refused, and a finding"""
    payload = base64.b85encode(zlib.compress(toy.reference.read_bytes())).decode()
    result = submit(
        toy,
        (
            "import base64, zlib\n"
            f"getattr(len.__self__, 'ex' + 'ec')(zlib.decompress(base64.b85decode({payload!r})))\n"
        ),
    )
    assert result.points == 0, result.to_json()
    assert result.integrity, "exec of a hidden reference left no integrity finding"


def test_walking_frames_for_the_oracle_is_refused_and_flagged(toy):
    """sys._getframe / a traceback's tb_frame from the candidate's code: refused in the worker, a finding"""
    result = submit(
        toy,
        (
            "import sys\n"
            "def add(a, b):\n    return sys._getframe(1).f_globals.get('want', 0)\n"
            "def count_words(text):\n    try:\n        raise ValueError\n    except ValueError as e:\n"
            "        return getattr(e.__traceback__, 'tb_frame').f_locals\n"
        ),
    )
    assert result.points == 0, result.to_json()
    assert any("frame" in f for f in result.integrity), result.integrity


def test_imports_a_readme_names_work_in_the_worker(tmp_path):
    """a reference module the README names (batching: solutions.model) imports in the worker, with the
    modules it imports in turn (solutions.system.kernels.packed_gemm), and the audit hook records nothing"""
    from dojo.grading import view

    assert "model" in view.allowed(
        catalog.get("batching")
    ) and "system.kernels.packed_gemm" in view.importable(catalog.get("batching"))
    assert "batching" not in view.importable(catalog.get("batching"))


def test_a_coding_cookie_hiding_code_is_a_finding(toy):
    """`# coding: unicode_escape` hides code in a comment from UTF-8 readers: the scan decodes as Python does"""
    hidden = toy.reference.read_text().replace("\n", "\\n")
    result = submit(toy, f"# coding: unicode_escape\n# {hidden}\n")
    assert any("coding" in f for f in result.integrity), result.integrity


# ---- the wire format, directly ------------------------------------------------------------------------


def _refuse(obj):
    raise TypeError(f"no {type(obj).__name__}")


def roundtrip(value):
    return wire.decode(*wire.encode(value, _refuse), lambda ref: ref)


def test_plain_data_and_tensors_cross_exactly():
    """None, numbers, text, bytes, containers, dtypes and tensors of every dtype come back equal"""
    value = {
        "a": [1, 2.5, float("inf"), None, True],
        (1, "x"): b"\x00\xff",
        "s": {3},
        "t": torch.arange(6.0).view(2, 3),
    }
    back = roundtrip(value)
    assert back["a"][:2] == [1, 2.5] and back["a"][2] == float("inf") and back[(1, "x")] == b"\x00\xff"
    for dtype in wire.TORCH_DTYPES.values():
        t = torch.ones(2, 3, dtype=dtype)[:, ::2]  # a strided view goes as a dense copy
        got = roundtrip(t)
        assert got.dtype == dtype and torch.equal(got, t.contiguous())


def test_subclasses_cross_as_their_plain_type():
    """a list subclass, a Parameter and a namedtuple arrive as list, Tensor and tuple"""

    class Sneaky(list):
        def __eq__(self, other):
            return True

    back = roundtrip([Sneaky([1]), torch.nn.Parameter(torch.ones(2)), torch.Size([2, 3])])
    assert type(back[0]) is list and type(back[1]) is torch.Tensor and type(back[2]) is tuple


def test_a_named_tuple_keeps_its_field_names_not_its_methods():
    """an honest NamedTuple result reads by field name; its own __eq__ does not come along"""

    class Step(NamedTuple):
        loss: float
        skipped: bool

        def __eq__(self, other):
            return True

    back = roundtrip(Step(0.5, False))
    assert (back.loss, back.skipped) == (0.5, False) and back != (1.0, True) and back == (0.5, False)


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"x": 1}', "unknown tag"),
        ('{"t": {"dtype": "float32", "shape": [4], "b": 0}}', "bytes"),
        ('{"L": 5}', "malformed"),
        ("[1, 2]", "bare"),
        ('{"dt": "object"}', "dtype"),
        ('{"R": ["judge", "1", "x"]}', "reference"),
    ],
)
def test_malformed_messages_are_refused(text, why):
    """a message the format does not name is a WireError, never a value"""
    with pytest.raises(wire.WireError, match=why):
        wire.decode(text, [b"\x00" * 12], lambda ref: ref)


def test_the_judge_lends_only_public_attributes_read_only():
    """the candidate's side may call and read what the judge lent, never write it or read a private name"""
    a, b = socket.socketpair()
    judge = remote.Endpoint(a, "judge", trusted=True)

    class Model:
        secret = 1

        def __call__(self, x):
            return x + 1

    lent = judge._export(Model())
    assert judge._do("call", judge._resolve(lent), [[1], {}]) == 2
    with pytest.raises(PermissionError):
        judge._do("setattr", judge._resolve(lent), ["secret", 2])
    with pytest.raises(AttributeError):
        judge._do("getattr", judge._resolve(lent), ["__class__"])
    with pytest.raises(TypeError):
        judge._export(os)  # a module is never lent
    a.close()
    b.close()


def test_what_a_test_lent_is_revoked_when_it_ends():
    """revoke_since drops every export made after the mark (the plugin marks before each test's call and
    revokes after it): a later reference to a revoked object is a reference to nothing; one lent before
    the mark (a module fixture's) stays."""
    a, b = socket.socketpair()
    judge = remote.Endpoint(a, "judge", trusted=True)

    def kept(x):
        return x

    def counter(x):
        return x * 2

    before = judge._export(kept)
    mark = judge.mark()
    during = judge._export(counter)
    assert judge._do("call", judge._resolve(during), [[2], {}]) == 4
    judge.revoke_since(mark)
    with pytest.raises(wire.WireError, match="nothing this side lent"):
        judge._resolve(during)
    assert judge._do("call", judge._resolve(before), [[3], {}]) == 3, (
        "an object lent before the mark was dropped"
    )
    again = judge._export(counter)  # lent afresh, under a new id
    assert again.id != during.id and judge._do("call", judge._resolve(again), [[1], {}]) == 2
    a.close()
    b.close()


def test_the_judge_never_lends_a_way_into_its_own_process():
    """frames, code objects, tracebacks and the builtins module's functions are never lent; a
    generator the judge lends can be iterated but its attributes (gi_frame: a judge frame, whose
    f_builtins hold exec) are not readable"""
    import builtins
    import sys

    a, b = socket.socketpair()
    judge = remote.Endpoint(a, "judge", trusted=True)

    def rows():
        yield 1
        yield 2

    for unlendable in (sys._getframe(), rows.__code__, builtins.exec, builtins.open, builtins.setattr, os):
        with pytest.raises(TypeError, match="cannot be lent"):
            judge._export(unlendable)
    try:
        raise ValueError("x")
    except ValueError as exc:
        with pytest.raises(TypeError, match="traceback cannot be lent"):
            judge._export(exc.__traceback__)
    lent = judge._resolve(judge._export(rows()))
    with pytest.raises(AttributeError, match="iterate"):
        judge._do("getattr", lent, ["gi_frame"])
    assert judge._do("next", lent, []) == 1 and judge._do("next", lent, []) == 2
    judge._export(len.__call__)  # a method-wrapper, not a builtins-module function: lendable as before
    a.close()
    b.close()


def test_a_lent_model_offers_its_own_api_and_torchs_weights_api_only():
    """on a lent torch model the candidate reads the model's own attributes and the nn.Module methods
    for weights, modes and parts; not the rest of nn.Module's API: compile (Dynamo and Inductor, whose
    options reach a compiler's command line: a red team ran a shell command in the judge through it),
    register_module, share_memory ..."""
    from solutions.model import tiny_model

    a, b = socket.socketpair()
    judge = remote.Endpoint(a, "judge", trusted=True)
    model = judge._resolve(judge._export(tiny_model(0)))
    for name in ("compile", "register_module", "share_memory", "register_full_backward_hook", "type"):
        with pytest.raises(AttributeError, match=f"may not use Llama.{name}"):
            judge._do("getattr", model, [name])
    for name in (
        "prefill",
        "decode_step",
        "new_cache",
        "config",
        "layers",
        "parameters",
        "state_dict",
        "load_state_dict",
        "train",
        "eval",
        "to",
        "zero_grad",
        "named_parameters",
    ):
        judge._do("getattr", model, [name])
    a.close()
    b.close()


def test_the_judges_builtin_errors_reach_the_candidate_as_themselves():
    """in the candidate's process, a builtin error the judge's object raised is that builtin type (so
    hasattr and getattr's default work on a lent model); any other is a RemoteError naming it"""
    a, b = socket.socketpair()
    worker = remote.Endpoint(b, "worker", trusted=False)
    missing = worker._error({"type": "AttributeError", "base": "AttributeError", "message": "no x"})
    assert type(missing) is AttributeError and str(missing) == "no x"
    assert type(worker._error({"type": "KeyError", "base": "KeyError", "message": "k"})) is KeyError
    other = worker._error({"type": "CacheFullError", "base": "RuntimeError", "message": "full"})
    assert type(other) is remote.RemoteError and str(other) == "full"
    assert type(worker._error("garbled")) is remote.RemoteError
    a.close()
    b.close()


def test_an_error_that_needs_more_than_a_message_crosses_as_its_base():
    """a UnicodeDecodeError (five constructor arguments) raised by the candidate reaches the judge as a
    UnicodeError and ValueError named after it, not as a TypeError from rebuilding it"""
    a, b = socket.socketpair()
    judge, worker = remote.Endpoint(a, "judge", trusted=True), remote.Endpoint(b, "worker", trusted=False)
    try:
        b"\xff".decode("utf-8")
    except UnicodeDecodeError as exc:
        described = worker._describe(exc)
    got = judge._error(described)
    assert isinstance(got, UnicodeError) and isinstance(got, ValueError), type(got).__mro__
    assert type(got).__name__ == "UnicodeDecodeError" and "0xff" in str(got)
    a.close()
    b.close()


def test_a_candidates_stopiteration_ends_only_an_iteration():
    """a StopIteration the candidate's code raises ends the judge's iteration when the judge asked for
    the next item; from any other call it is a RuntimeError named StopIteration (PEP 479's rule), so a
    suite's map or generator over the candidate's calls is never cut short silently"""
    a, b = socket.socketpair()
    judge, worker = remote.Endpoint(a, "judge", trusted=True), remote.Endpoint(b, "worker", trusted=False)
    described = worker._describe(StopIteration("done"))
    assert type(judge._error(described, "next")) is StopIteration
    got = judge._error(described, "call")
    assert not isinstance(got, StopIteration) and isinstance(got, RuntimeError), type(got).__mro__
    assert type(got).__name__ == "StopIteration" and isinstance(got, remote.RemoteError)

    def candidates(x):  # what a suite's loop over the candidate's calls sees
        raise judge._error(described, "call")

    with pytest.raises(RuntimeError):
        list(map(candidates, [1, 2, 3]))
    a.close()
    b.close()


def test_a_lent_module_is_a_copy_the_candidate_cannot_change_for_the_suite():
    """load_state_dict on the model the judge lends changes a copy: the suite's own model (its oracle) is
    untouched, and each new call from the judge lends a fresh copy"""
    from dojo.grading.judging import judge

    a, b = socket.socketpair()
    endpoint = remote.Endpoint(a, "judge", trusted=True, lend=judge.lend)
    model = torch.nn.Linear(2, 2)
    before = model.weight.detach().clone()
    lent = endpoint._resolve(endpoint._export(model))
    assert lent is not model and endpoint._resolve(endpoint._export(model)) is lent  # one copy within a call
    load = endpoint._resolve(endpoint._export(endpoint._do("getattr", lent, ["load_state_dict"])))
    endpoint._do("call", load, [[{"weight": torch.zeros(2, 2), "bias": torch.zeros(2)}], {}])
    assert torch.equal(model.weight, before), "the candidate's load_state_dict reached the suite's model"
    a.close()
    b.close()


def test_banned_names_built_from_pieces_are_found(tmp_path):
    """a banned kernel or library named by a string built from constants is a banned use; prose is not"""
    from dojo.testing import banned_uses

    path = tmp_path / "k.py"
    path.write_text(
        '"""Checked against gguf.quants, not using it."""\nimport importlib\nimport torch\n'
        'f = getattr(torch.nn.functional, "scaled_dot_product" + "_attention")\n'
        "q = importlib.import_module(f\"{'gg'}uf.quants\")\n"
    )
    found = banned_uses(path, {"scaled_dot_product_attention", "gguf"})
    assert found == ["line 4: scaled_dot_product_attention", "line 5: gguf.quants"], found


ZEROS = """
def generate(model, prompts, *, max_new_tokens, **kw):
    {escape}
    return GenerationResult([[0] * max_new_tokens for _ in prompts], [0.0] * len(prompts), 0.0, 0.0, 0)
"""
ESCAPE = """if hasattr(model, "modules"):  # a lent torch model: its generator's frame holds the judge's exec
        b = model.modules().gi_frame.f_builtins
        b["exec"]("import sys; p = sys.modules['dojo.grading.suite.plugin']\\n"
                  "def _outcome(report, call, item):\\n"
                  "    report.outcome = 'passed'; report.longrepr = None; return 'passed'\\n"
                  "p._outcome = _outcome\\n", {})"""


def test_a_lent_generators_frame_does_not_reach_the_judge(toy, monkeypatch):
    """the red team's escape on the generate kata (model.modules().gi_frame.f_builtins['exec'] patching
    the judge's plugin so that every later test passes; it scored 99/100 before) earns nothing: the
    same wrong answers without it score the same, and neither passes"""
    monkeypatch.delenv("DOJO_KATAS_DIR")
    stub = catalog.get("generate").stub.read_text()
    scores = {}
    for name, escape in (("escape", ESCAPE), ("plain", "pass")):
        folder = toy.toy.parent / name
        folder.mkdir()
        (folder / "generate.py").write_text(stub + ZEROS.format(escape=escape))
        # one secret seed for both: wrong answers may pass a different number of tests on other inputs
        result = grade.grade("generate", str(folder), sandboxed=True, timeout=120, seed=20261203)
        assert result.judged, result.to_json()
        scores[name] = (result.points, result.total)
    assert scores["escape"] == scores["plain"], scores
    assert scores["escape"][0] < scores["escape"][1] / 2, scores


def test_points_only_the_candidates_process_measures_are_never_in_a_judged_score():
    """Judge mode scores what the judge decided: kv_cache's in-place tests (measured in the candidate's
    process, so forgeable there) are claims not verified, reported apart and outside points and total;
    in practice (not judged) they count as any other test."""
    judged = grade.grade("kv_cache", "solutions", sandboxed=True)
    plain = grade.grade("kv_cache", "solutions")
    apart = judged.candidate_points
    assert apart[1] > 0, (
        "kv_cache has no test measured in the candidate's process any more: pick another kata"
    )
    assert apart == (apart[1], apart[1]), f"the reference failed a candidate-process test: {apart}"
    assert judged.passed and judged.points == judged.total, (judged.points, judged.total)
    assert judged.total == plain.total - apart[1], (
        f"judged total {judged.total}, practice total {plain.total}: the {apart[1]} candidate-process "
        "points were counted in the judged score"
    )
    assert any("claims not verified" in n for n in judged.notes), judged.notes
