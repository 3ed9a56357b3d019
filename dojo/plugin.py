"""The grading plugin: pytest options, markers and fixtures every hidden kata suite relies on.

A kata suite is a test module with a module-level `KATA = "<slug>"`. Its tests ask for the
`kata` fixture (the implementation under test, imported by path from `--target`) and carry
`@pytest.mark.points(n)` and, for the README's worked examples, `@pytest.mark.example`. The first
line of a test's docstring is its *property*, the name a learner reads in the report.

With `--dojo-results FILE` the plugin writes one JSON document with a row per test (id,
property, outcome, points, message, duration); the runner reads that, never pytest's text.
Loaded for every pytest run through `addopts = -p dojo.plugin` in pyproject.toml.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from dojo import targets

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dojo", "decode-dojo grading")
    group.addoption(
        "--target",
        default=os.environ.get("DOJO_TARGET", "solutions"),
        help="implementation to grade: solutions | katas | workspace | DIR | FILE.py (default: solutions)",
    )
    group.addoption("--examples-only", action="store_true", help="run only the README's worked examples")
    group.addoption("--dojo-results", default=None, metavar="FILE", help="write structured results as JSON")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): points a graded test is worth (default 1)")
    config.addinivalue_line("markers", "example: a worked example from the kata README")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--examples-only"):
        return
    keep = [item for item in items if item.get_closest_marker("example")]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


def kata_slug(request: pytest.FixtureRequest) -> str:
    slug = getattr(request.module, "KATA", None)
    if not slug:
        raise pytest.UsageError(f"{request.module.__name__} uses the kata fixture but sets no KATA = '<slug>'")
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
    """The implementation under test, imported by path as a fresh module."""
    slug = kata_slug(request)
    try:
        return targets.load_module(kata_path, f"dojo_target_{slug}")
    except SystemExit as exc:
        pytest.fail(f"{kata_path.name} called sys.exit({exc.code}) while being imported", pytrace=False)
    except Exception as exc:  # the learner's import-time error is the result
        pytest.fail(f"{kata_path.name} raised at import: {type(exc).__name__}: {exc}", pytrace=False)


def property_of(item: pytest.Item) -> str:
    doc = getattr(getattr(item, "function", None), "__doc__", None)
    if doc and doc.strip():
        return doc.strip().splitlines()[0].strip()
    return item.name.removeprefix("test_").replace("_", " ")


def points_of(item: pytest.Item) -> int:
    marker = item.get_closest_marker("points")
    return int(marker.args[0]) if marker and marker.args else 1


def failure_message(excinfo: pytest.ExceptionInfo | None, longrepr) -> str:
    """The readable part of a failure: the assertion's own message, or the exception and where."""
    if excinfo is None:
        return str(longrepr or "")[-2000:]
    exc = excinfo.value
    if isinstance(exc, AssertionError):
        text = str(exc).split("\nassert ")[0].strip()
        return text or "assertion failed"
    if isinstance(exc, pytest.fail.Exception):
        return str(exc.msg if hasattr(exc, "msg") else exc)
    if isinstance(exc, pytest.skip.Exception):
        return str(exc)
    where = ""
    for entry in reversed(excinfo.traceback):
        path = str(entry.path)
        if "dojo_target" in path or not ("/tests/" in path or "site-packages" in path or "/dojo/" in path):
            where = f" (at {Path(path).name}:{entry.lineno + 1})"
            break
    return f"{type(exc).__name__}: {exc}{where}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        report.dojo_row = {
            "id": item.nodeid,
            "name": item.name,
            "property": property_of(item),
            "points": points_of(item),
            "example": item.get_closest_marker("example") is not None,
            "outcome": "passed" if report.passed else ("skipped" if report.skipped else "failed"),
            "message": "" if report.passed else failure_message(call.excinfo, report.longrepr),
            "duration": round(call.duration, 4),
        }


_rows: list[dict] = []  # one per graded test, in run order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    row = getattr(report, "dojo_row", None)
    if row is not None:
        _rows.append(row)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--dojo-results")
    if not path:
        return
    doc = {
        "target": session.config.getoption("--target"),
        "examples_only": bool(session.config.getoption("--examples-only")),
        "exitstatus": int(exitstatus),
        "finished": time.time(),
        "tests": _rows,
    }
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    tmp.replace(path)
