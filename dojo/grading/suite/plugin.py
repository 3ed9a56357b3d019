"""The grading plugin: pytest options, markers and fixtures every hidden kata suite relies on.

A kata suite sets `KATA = "<slug>"`; its tests ask for the `kata` fixture (the implementation under
test, from `--target`) and carry `points(n)`, `example`, `optional`, `builds_on(...)`, `machine`,
`measured` or `candidate_process` markers; the first paragraph of a test's docstring is its property.
The plugin writes a row per test to the grader's signed channel (dojo.grading.channel) or to
`--dojo-results FILE`, and fails a test that runs past `--dojo-test-timeout`. Loaded for every pytest
run (pyproject.toml's addopts). It decides no grade: dojo.grading.outcomes reads its records.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dojo import targets, testing
from dojo.grading import channel, machine_lock
from dojo.grading.suite import causes
from dojo.grading.suite.failures import TestTimeout, case_label, failure_message


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dojo", "decode-dojo grading")
    group.addoption(
        "--target",
        default=os.environ.get("DOJO_TARGET", "solutions"),
        help="implementation to grade: solutions | katas | workspace | DIR | FILE.py (default: solutions)",
    )
    group.addoption("--examples-only", action="store_true", help="run only the README's worked examples")
    group.addoption("--dojo-results", default=None, metavar="FILE", help="write structured results as JSON")
    group.addoption(
        "--dojo-test-timeout",
        type=float,
        default=None,
        metavar="S",
        help="fail any test that runs past S seconds",
    )
    group.addoption(
        "--audit-allowed",
        default=None,
        metavar="MODULES",
        help="install the audit hook (dojo.grading.confine.audit) before the implementation is imported; "
        "MODULES: comma-separated reference modules it may import",
    )
    group.addoption(
        "--judge",
        action="store_true",
        help="judge mode: the implementation runs in the worker named by $DOJO_JUDGE_WORKER, never here; "
        "tests marked candidate_process (and machine) are deferred",
    )
    group.addoption(
        "--input-seed-file",
        default=None,
        metavar="FILE",
        help="judge mode: read the secret input seed (dojo.seeds) from FILE and delete FILE, before the "
        "worker starts",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _sender
    _sender = _sender or channel.Sender.from_env()  # before any candidate code is imported
    if config.getoption("--judge", default=False):
        from dojo.grading.judging import judge

        _use_secret_seed(config.getoption("--input-seed-file"))

        judge.worker().boot()  # the worker starts now and imports its libraries while the suite is collected
    machine_lock.connect()  # likewise: the grader's timing lock service, when it gave one
    config.addinivalue_line("markers", "points(n): points a graded test is worth (default 1)")
    config.addinivalue_line("markers", "example: a worked example from the kata README")
    config.addinivalue_line(
        "markers",
        "optional: a test of the kata's optional part: its points are graded apart (optional_points), "
        "and the kata passes without it",
    )
    config.addinivalue_line(
        "markers",
        "builds_on(*tests): basic tests whose failure explains this one's (dojo.grading.suite.causes)",
    )
    config.addinivalue_line(
        "markers",
        "machine: times the real machine: runs under the machine-wide timing lock, may end inconclusive",
    )
    config.addinivalue_line(
        "markers",
        "measured: measures the candidate's process from outside it (its peak memory); decided where the "
        "suite runs, in judge mode too, and may end inconclusive where the machine cannot measure",
    )
    config.addinivalue_line(
        "markers",
        "candidate_process: can only be measured inside the candidate's process (timings, gradients "
        "through its code, buffer identity); judge mode runs it apart and reports its points apart",
    )


def _use_secret_seed(file: str | None) -> None:
    """Draw the suite's inputs from the judge's secret seed (dojo.seeds), read once from `file` and gone
    from the disk before the worker exists."""
    if file is None:
        return
    from dojo import seeds

    path = Path(file)
    try:
        text = path.read_text()
    finally:
        path.unlink(missing_ok=True)
    if not text.strip().isdigit():
        raise pytest.UsageError(f"--input-seed-file {file}: holds {text[:40]!r}, not a seed")
    seeds.use_secret(int(text))


def in_candidate_process(item: pytest.Item) -> bool:
    """Whether the test must run where the candidate's code runs: marked candidate_process, or machine."""
    return any(item.get_closest_marker(m) for m in ("candidate_process", "machine"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--examples-only"):
        keep = [item for item in items if item.get_closest_marker("example")]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    if config.getoption("--judge"):  # the grader runs these apart, in the candidate's process
        deferred = [item for item in items if in_candidate_process(item)]
        config.hook.pytest_deselected(items=deferred)
        items[:] = [item for item in items if item not in deferred]
        _emit({"deferred": [describe(item) for item in deferred]})


def kata_slug(request: pytest.FixtureRequest) -> str:
    slug = getattr(request.module, "KATA", None)
    if not slug:
        raise pytest.UsageError(
            f"{request.module.__name__} uses the kata fixture but sets no KATA = '<slug>'"
        )
    return slug


@pytest.fixture(scope="module")
def kata_path(request: pytest.FixtureRequest) -> Path:
    """Path of the implementation under test."""
    slug = kata_slug(request)
    try:
        return targets.resolve(slug, request.config.getoption("--target"))
    except (FileNotFoundError, ValueError) as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def kata(request: pytest.FixtureRequest, kata_path: Path):
    """The implementation under test, imported by path as a fresh module; in judge mode (--judge) a
    dojo.grading.judging.judge.KataModule onto the worker that imported it."""
    slug = kata_slug(request)
    try:
        if request.config.getoption("--judge"):
            from dojo.grading.judging import (
                judge,  # only here: it imports torch, which a toy suite never needs
            )

            return judge.kata_module(f"dojo_target_{slug}")
        _audit(request.config, kata_path)
        return targets.load_module(kata_path, f"dojo_target_{slug}")
    except SystemExit as exc:
        pytest.fail(f"{kata_path.name} called sys.exit({exc.code}) while being imported", pytrace=False)
    except TestTimeout as exc:
        pytest.fail(f"{kata_path.name} did not finish importing: {exc}", pytrace=False)
    except Exception as exc:  # noqa: BLE001 (the learner's import-time error is the result)
        if type(exc).__name__ == "BoundaryError":  # judge mode: the worker died or hung while importing it
            from dojo.grading.judging import judge

            pytest.fail(
                f"{kata_path.name} could not be imported: {judge.describe_failure(exc)}", pytrace=False
            )
        pytest.fail(f"{kata_path.name} raised at import: {type(exc).__name__}: {exc}", pytrace=False)


_refused: list[dict] = []  # the audit hook's refusals in this process (--audit-allowed)


def _audit(config: pytest.Config, path: Path) -> None:
    """With --audit-allowed, the audit hook watches the implementation from before its import (once: a
    hook cannot be removed). Its refusals are sent as an `audit` record at the end."""
    allowed = config.getoption("--audit-allowed")
    if allowed is None or _refused or getattr(_audit, "installed", False):
        return
    from dojo.grading.confine import audit

    audit.install({str(path)}, _refused.append, allowed=[a for a in allowed.split(",") if a])
    _audit.installed = True


def property_of(item: pytest.Item) -> str:
    """The test's docstring's first paragraph on one line (a sentence wrapped over two lines is kept whole,
    never cut mid-phrase), else its name in words."""
    doc = getattr(getattr(item, "function", None), "__doc__", None)
    if doc and doc.strip():
        return " ".join(doc.strip().split("\n\n", 1)[0].split())
    return item.name.removeprefix("test_").replace("_", " ")


def points_of(item: pytest.Item) -> int:
    marker = item.get_closest_marker("points")
    return int(marker.args[0]) if marker and marker.args else 1


@contextmanager
def _time_limit(config: pytest.Config) -> Iterator[None]:
    """Raise TestTimeout in the test (main thread) once --dojo-test-timeout seconds have passed."""
    seconds = config.getoption("--dojo-test-timeout")
    if not seconds:
        yield
        return

    frozen = [machine_lock.frozen_s()]

    def on_alarm(signum, frame):
        more = machine_lock.frozen_s() - frozen[0]  # time frozen for another grading's timing test: not ours
        if more > 0.01:
            frozen[0] += more
            signal.setitimer(signal.ITIMER_REAL, more)
            return
        raise TestTimeout(f"still running after {seconds:g} s: an infinite loop, or far too slow")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if item.get_closest_marker("machine"):  # held until the teardown: module fixtures may time too
        lock = machine_lock.timing_lock()  # the grader holds it for us, or (practice) the flock here
        lock.__enter__()  # may raise Inconclusive: the setup, and so the test, is inconclusive
        item.stash[_TIMING_LOCK] = lock
    with _time_limit(item.config):  # the setup imports the learner's file: an import can hang too
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    yield
    lock = item.stash.get(_TIMING_LOCK, None)
    if lock is not None:
        del item.stash[_TIMING_LOCK]
        lock.__exit__(None, None, None)


_TIMING_LOCK = pytest.StashKey()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    endpoint = _judge_endpoint()
    mark = endpoint.mark() if endpoint is not None else 0
    with _time_limit(item.config):
        yield
    if endpoint is not None and endpoint is _judge_endpoint():  # (a worker restarted lent nothing old)
        endpoint.revoke_since(mark)  # what the test lent the candidate's code ends with it


def _judge_endpoint():
    """The judge's end of its worker's connection, in a judged run whose worker is up; else None."""
    from dojo.grading.judging import judge

    current = judge._worker if judge.active() else None
    return current.endpoint if current is not None else None


def describe(item: pytest.Item) -> dict:
    """What a results row says about a test before it runs."""
    return {
        "id": item.nodeid,
        "name": item.name,
        "property": property_of(item),
        "case": case_label(item),
        "points": points_of(item),
        "example": item.get_closest_marker("example") is not None,
        "optional": item.get_closest_marker("optional") is not None,
        "candidate_process": in_candidate_process(item),
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        verdict = _outcome(report, call, item)
        message = "" if report.passed else failure_message(call.excinfo, report.longrepr, _target_file(item))
        if report.skipped and verdict == "failed" and _is_kata_suite(item):  # pytest's exit status must agree
            raised = type(call.excinfo.value).__name__ if call.excinfo else "a skip"
            message = f"{message}\n(raised {raised}: a skipped test counts as failed)".lstrip()
            report.outcome, report.longrepr = "failed", message
        message = causes.explain(item, property_of(item), verdict == "failed", message)
        report.dojo_row = {
            **describe(item),
            "outcome": verdict,
            "message": message,
            "duration": round(call.duration, 4),
        }


def _is_kata_suite(item: pytest.Item) -> bool:
    """A hidden kata suite's test (its module sets KATA): the runner's own tests may skip as usual."""
    return bool(getattr(getattr(item, "module", None), "KATA", None))


def _outcome(report: pytest.TestReport, call: pytest.CallInfo, item: pytest.Item) -> str:
    """passed | failed | inconclusive. A skip is a failure, except a machine or measured test's own
    Inconclusive (dojo.testing.inconclusive) raised by the suite: never from the candidate's file."""
    if report.passed:
        return "passed"
    if (
        call.excinfo is not None
        and call.excinfo.errisinstance(testing.Inconclusive)
        and (item.get_closest_marker("machine") or item.get_closest_marker("measured"))
        and not _raised_by_candidate(call.excinfo, item)
    ):
        return "inconclusive"
    return "failed"


def _raised_by_candidate(excinfo: pytest.ExceptionInfo, item: pytest.Item) -> bool:
    """Whether any frame between the test and the raise is in the candidate's file (or is no file of
    the suite's, dojo's or a library's): a skip or Inconclusive raised there is the candidate's."""
    target = _target_file(item)
    for entry in excinfo.traceback:
        path = str(entry.path)
        if target and path == target or not path.endswith(".py"):
            return True
    return False


def _target_file(item: pytest.Item) -> str | None:
    module = getattr(item, "funcargs", {}).get("kata")
    judge = sys.modules.get("dojo.grading.judging.judge")
    if judge is not None and judge.is_remote(module):  # only the name is shown: the frames were the worker's
        path = getattr(item, "funcargs", {}).get("kata_path")
        return str(path) if path else None
    return getattr(module, "__file__", None)


# ---- the results: a stream while the run goes on, one document at its end ----------------------

_rows: list[dict] = []  # one per graded test, in run order
_errors: list[dict] = []  # collection errors: a suite that did not import
_stream = None  # FILE.jsonl beside --dojo-results FILE, line-buffered
_config: pytest.Config | None = None
_sender: channel.Sender | None = None  # the grader's signed channel, when it gave one


def _emit(record: dict) -> None:
    global _stream
    if _sender is not None:
        _sender.send(record)
    path = _config.getoption("--dojo-results") if _config else None
    if not path:
        return
    if _stream is None:
        _stream = open(f"{path}.jsonl", "a", buffering=1)  # noqa: SIM115 (open for the whole session)
    _stream.write(json.dumps(record) + "\n")


def pytest_sessionstart(session: pytest.Session) -> None:
    global _config
    _config = session.config


def pytest_collection_finish(session: pytest.Session) -> None:
    _emit({"collected": [describe(item) for item in session.items]})


def pytest_runtest_logstart(nodeid: str, location) -> None:
    _emit({"start": nodeid})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:  # the suite itself did not import: say why (pytest's text is not read)
        error = {"id": report.nodeid, "message": str(report.longrepr)[-3000:]}
        _errors.append(error)
        _emit({"error": error})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    row = getattr(report, "dojo_row", None)
    if row is not None:
        _rows.append(row)
        _emit({"row": row})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    judge = sys.modules.get("dojo.grading.judging.judge")
    if session.config.getoption("--judge") and judge is not None and judge.started():
        _emit({"audit": judge.audit_findings()})
    elif _refused:
        _emit({"audit": list(_refused)})
    if _sender is not None:
        _sender.send(
            {
                "end": {
                    "exitstatus": int(exitstatus),
                    "examples_only": bool(session.config.getoption("--examples-only")),
                }
            }
        )
    path = session.config.getoption("--dojo-results")
    if not path:
        return
    doc = {
        "target": session.config.getoption("--target"),
        "examples_only": bool(session.config.getoption("--examples-only")),
        "exitstatus": int(exitstatus),
        "finished": time.time(),
        "tests": _rows,
        "errors": _errors,
    }
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    tmp.replace(path)
