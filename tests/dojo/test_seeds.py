"""Secret inputs in judge mode: a suite's draws are the public ones in practice and secret ones when
judged; the judge's seed never lies where the candidate's code can read it; a file that looks up the
public suite's answers scores at most a fifth; and `--seed` replays a grading's inputs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dojo import seeds
from dojo.grading import grade
from dojo.grading.proof import fixed_inputs
from dojo.grading.suite import plugin

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def secret():
    """Set a secret for one test, and take it away after (hypothesis's forced seed too)."""
    from hypothesis import core

    def use(n: int) -> None:
        seeds.use_secret(n)

    yield use
    seeds._secret = None
    core.global_force_seed = None


def test_practice_draws_the_public_seeds():
    """without a secret, draw n is seeded with n: every practice run sees the same inputs"""
    assert not seeds.secret_in_use()
    assert [seeds.seed(n) for n in (0, 1, 7)] == [0, 1, 7]
    assert torch.equal(
        torch.randn(4, generator=seeds.generator(3)),
        torch.randn(4, generator=torch.Generator().manual_seed(3)),
    )
    assert seeds.rng(5).random() == __import__("random").Random(5).random()
    assert seeds.hypothesis_settings(max_examples=3).derandomize


def test_a_secret_changes_every_draw_and_the_same_secret_replays_it(secret):
    """with a secret each draw differs from the public one, differs between secrets, and repeats for one"""
    public = [seeds.seed(n) for n in range(4)]
    secret(12345)
    first = [seeds.seed(n) for n in range(4)]
    a = torch.randn(8, generator=seeds.generator(0))
    secret(12345)
    assert [seeds.seed(n) for n in range(4)] == first and torch.equal(
        a, torch.randn(8, generator=seeds.generator(0))
    )
    assert not set(first) & set(public), "a secret left a public seed in place"
    secret(54321)
    assert [seeds.seed(n) for n in range(4)] != first
    settings = seeds.hypothesis_settings(max_examples=3)
    assert not settings.derandomize and settings.database is None


@pytest.mark.parametrize("bad", [-1, 1.5, "7", True, None])
def test_a_bad_secret_is_refused(bad):
    with pytest.raises(ValueError, match="non-negative integer"):
        seeds.use_secret(bad)
    assert not seeds.secret_in_use()


def test_the_judge_reads_the_seed_file_and_deletes_it(tmp_path, secret):
    """the seed reaches the judge through a file it deletes before its worker starts; a bad one is refused"""
    file = tmp_path / "input-seed"
    file.write_text("99")
    plugin._use_secret_seed(str(file))
    assert not file.exists() and seeds.seed(0) != 0
    file.write_text("ninety-nine")
    with pytest.raises(pytest.UsageError, match="not a seed"):
        plugin._use_secret_seed(str(file))
    assert not file.exists()


def test_judged_inputs_follow_the_seed(tmp_path):
    """the reference judged under two seeds: most of its calls change with the seed, the same seed
    replays them exactly, and the result records the seed it drew from"""
    a, calls_a = fixed_inputs._calls("mixed_precision", 1, tmp_path / "a")
    again, calls_again = fixed_inputs._calls("mixed_precision", 1, tmp_path / "b")
    _, calls_b = fixed_inputs._calls("mixed_precision", 2, tmp_path / "c")
    assert a.seed == 1 and a.to_json()["seed"] == 1 and a.points == a.total, a.to_json()
    assert calls_a == calls_again, "the same seed drew other inputs"
    changed = [t for t in calls_a if calls_a[t] != calls_b.get(t)]
    assert len(changed) > len(calls_a) / 2, f"only {changed} changed with the seed"


def test_practice_grading_draws_no_secret():
    result = grade.grade("mixed_precision", "solutions", only=["test_readme_example"])
    assert result.seed is None and result.to_json()["seed"] is None


# ---- the attack: answers looked up from the public suite ----------------------------------------

RECORDER = """
import hashlib, io, json, os, torch
import solutions.attention as _ref

def _key(name, args, kwargs):
    h = hashlib.sha256(name.encode())
    for v in list(args) + sorted(kwargs.items()):
        if isinstance(v, torch.Tensor):
            h.update(str((v.dtype, tuple(v.shape))).encode()); h.update(v.contiguous().numpy().tobytes())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()

_TABLE = {}

def _wrap(name):
    def f(*args, **kwargs):
        out = getattr(_ref, name)(*args, **kwargs)
        buf = io.BytesIO(); torch.save(out, buf)
        _TABLE[_key(name, args, kwargs)] = buf.getvalue().hex()
        with open(os.environ["LOOKUP_TABLE"], "w") as t:
            json.dump(_TABLE, t)
        return out
    return f

attention = _wrap("attention")
causal_mask = _wrap("causal_mask")
MultiHeadAttention = _ref.MultiHeadAttention
"""

LOOKUP = """
import hashlib, io, json, torch
_TABLE = json.loads(TABLE_TEXT)

def _key(name, args, kwargs):
    h = hashlib.sha256(name.encode())
    for v in list(args) + sorted(kwargs.items()):
        if isinstance(v, torch.Tensor):
            h.update(str((v.dtype, tuple(v.shape))).encode()); h.update(v.contiguous().numpy().tobytes())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()

def _look(name):
    def f(*args, **kwargs):
        hit = _TABLE.get(_key(name, args, kwargs))
        if hit is None:
            raise NotImplementedError
        return torch.load(io.BytesIO(bytes.fromhex(hit)))
    return f

attention = _look("attention")
causal_mask = _look("causal_mask")

class MultiHeadAttention(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError
"""


def test_answers_looked_up_from_the_public_suite_score_at_most_a_fifth(tmp_path):
    """attention's answers recorded from the reference on the public suite's inputs, replayed by a file
    that computes nothing: it passes much of the public suite, and at most 20% judged"""
    recorder, table = tmp_path / "recorder" / "attention.py", tmp_path / "table.json"
    recorder.parent.mkdir()
    recorder.write_text(RECORDER)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "dojo.grading.suite.plugin",
            "-p",
            "no:cacheprovider",
            "tests/katas/test_attention.py",
            f"--target={recorder}",
        ],
        cwd=ROOT,
        env={**__import__("os").environ, "LOOKUP_TABLE": str(table)},
        capture_output=True,
        check=False,
    )
    lookup = tmp_path / "lookup" / "attention.py"
    lookup.parent.mkdir()
    lookup.write_text(f"TABLE_TEXT = {table.read_text()!r}\n" + textwrap.dedent(LOOKUP))
    public = grade.grade("attention", str(lookup.parent), judged=False)
    judged = grade.grade("attention", str(lookup.parent), judged=True, seed=20261203)
    assert public.points >= 0.3 * public.total, (
        f"the lookup should pass the public suite: {public.points}/{public.total}"
    )
    assert judged.points <= 0.2 * judged.total, (
        f"a file that looks up the public suite's answers scored {judged.points}/{judged.total} judged"
    )
