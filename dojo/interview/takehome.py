"""Take-home grading: `dojo grade PATH...` grades every kata file in each submission, sandboxed, into
one report, and says which submissions share their code (dojo.grading.scan.similarity).

dojo.interview.intake reads and copies each submission; each copy is graded with `sandboxed=True` (a .py
by dojo.grading.grade.grade, a notebook by dojo.notebook.grading). What goes wrong with one file is that
file's error, and the others are graded as ever. `write_report` writes the report atomically. Nothing
is recorded in the progress database.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dojo import catalog
from dojo.grading import grade
from dojo.grading.confine import bounded
from dojo.grading.result import GradeResult
from dojo.grading.scan import similarity
from dojo.interview import intake

SIMILARITY_TIMEOUT_S = 120.0  # one kata's similarity check, all its submissions together
NOT_GRADED = "not graded: the file was refused, or its grading failed (the message says why)"


def grade_submissions(
    folders: list[Path], *, jobs: int = 2, timeout: float | None = None, seed: int | None = None
) -> dict:
    """Grade take-home submissions, sandboxed: every kata with a suite whose <slug>.py, or else
    <slug>.ipynb, is in each folder (a .ipynb instead of a folder: its kata, see dojo.notebook), `jobs`
    gradings at once. Returns the report: {"version", "graded", "submissions": [{"path", "katas":
    {slug: results.json document}, "errors": [the submission's own problems], "points", "total", "passed",
    "sandboxed" and "judged" (None when no kata file ran), "integrity": {slug: findings},
    "candidate_process_points": {"points", "total"} (measured where the candidate's code ran), "optional_points":
    {"points", "total"} (the katas' optional parts, graded apart)}], "similar": dojo.grading.scan.similarity.find's pairs and copies
    of the reference, plus "errors"}, "seed": the secret input seed every grading drew its inputs from (made
    here when None; `dojo grade --seed` replays it). Raises nothing for what a submission holds; records
    nothing in the progress DB."""
    seed = secrets.randbits(48) if seed is None else seed
    katas = {k.slug: k for k in catalog.load() if k.has_suite}
    submissions, ready = [], []
    with tempfile.TemporaryDirectory(prefix="dojo-takehome-") as private:  # 0700: the copies are this user's
        seen: dict[str, Path] = {}
        for i, folder in enumerate(map(Path, folders)):
            first = seen.setdefault(os.path.realpath(folder), folder)
            if first is not folder:  # graded once, at its first mention
                why = f"{folder} is given twice (also as {first}): graded once, at its first mention"
                submissions.append(
                    {"path": _shown(Path(os.path.abspath(folder))), "katas": {}, "errors": [why]}
                )
                continue
            prepared = _prepare(folder, list(katas), Path(private) / str(i))
            sub = {"path": _shown(prepared.path), "katas": {}, "errors": prepared.errors}
            for slug, (file, why) in prepared.refused.items():
                sub["katas"][slug] = _error(slug, prepared.path, file, why).to_json()
            submissions.append(sub)
            ready += [(sub, prepared.path, r) for r in prepared.ready]
        with ThreadPoolExecutor(
            max_workers=max(1, jobs)
        ) as pool:  # each grading is a subprocess: threads suffice
            futures = [
                (sub, r.slug, pool.submit(_grade_one, folder, r, timeout, seed)) for sub, folder, r in ready
            ]
            for sub, slug, future in futures:
                sub["katas"][slug] = future.result()
    for sub in submissions:
        results = sub["katas"].values()
        sub["points"] = sum(r["points"] for r in results)
        sub["total"] = sum(r["total"] for r in results)
        sub["passed"] = (
            bool(sub["katas"]) and not sub["errors"] and all(r["status"] == "pass" for r in results)
        )
        sub["inconclusive"] = sum(len(r["inconclusive"]) for r in results)
        ran = [
            r for r in results if NOT_GRADED not in r["notes"]
        ]  # a refused file says nothing of the sandbox
        sub["sandboxed"] = all(r["sandboxed"] for r in ran) if ran else None
        sub["integrity"] = {slug: r["integrity"] for slug, r in sub["katas"].items() if r["integrity"]}
        apart = [r.get("candidate_process_points", {}) for r in results]  # judge mode cannot vouch for these
        sub["candidate_process_points"] = {
            "points": sum(a.get("points", 0) for a in apart),
            "total": sum(a.get("total", 0) for a in apart),
        }
        extra = [r.get("optional_points", {}) for r in results]  # outside points, total and passed
        sub["optional_points"] = {
            "points": sum(o.get("points", 0) for o in extra),
            "total": sum(o.get("total", 0) for o in extra),
        }
        sub["judged"] = all(r.get("judged") for r in ran) if ran else None
    sources: dict[str, dict[str, str]] = {}
    for sub, _, r in ready:
        sources.setdefault(r.slug, {})[sub["path"]] = r.source
    return {
        "version": 1,
        "graded": time.time(),
        "seed": seed,
        "submissions": submissions,
        "similar": _similar(sources, katas),
    }


def write_report(doc: dict, path: Path) -> None:
    """Write the report as JSON at `path`, atomically: a reader sees the old file or the whole new one.
    Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(doc, out, indent=2)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _prepare(folder: Path, slugs: list[str], private: Path) -> intake.Prepared:
    try:
        return intake.prepare(folder, slugs, private)
    except Exception as exc:  # guarded: a bug here is this submission's error, never the run's end
        return intake.Prepared(Path(os.path.abspath(folder)), errors=[f"{folder} could not be read: {exc!r}"])


def _grade_one(folder: Path, ready: intake.Ready, timeout: float | None, seed: int) -> dict:
    """One sandboxed grading of a private copy, reported under the candidate's own path: a .py by the engine, a
    notebook through the notebook layer (cells, not lines). A failure of the grading itself is the file's error."""
    try:
        if ready.copy.suffix == ".py":
            result = grade.grade(
                ready.slug, str(ready.copy.parent), timeout=timeout, sandboxed=True, seed=seed
            )
        else:
            from dojo.notebook import grading as notebooks

            result = notebooks.grade_notebook(
                ready.copy, ready.slug, timeout=timeout, sandboxed=True, seed=seed
            )
        return dataclasses.replace(result, target=_shown(folder), path=_shown(ready.original)).to_json()
    except Exception as exc:  # guarded: one file's grading never ends the run
        why = f"{ready.original.name} could not be graded: {type(exc).__name__}: {exc}"
        return _error(ready.slug, folder, ready.original, why).to_json()


def _error(slug: str, folder: Path, file: Path, why: str) -> GradeResult:
    """The result of a kata file that could not be graded: no tests, status "error", `why` as its message."""
    return GradeResult(
        slug=slug,
        target=_shown(folder),
        path=_shown(file),
        tests=[],
        points=0,
        total=0,
        passed=False,
        duration=0.0,
        started=time.time(),
        error=why,
        notes=[NOT_GRADED],
    )


def _similar(sources: dict[str, dict[str, str]], katas: dict[str, catalog.Kata]) -> dict:
    """dojo.grading.scan.similarity.find per kata, each in a bounded child; a kata whose check cannot finish goes
    into "errors" and the others are reported as ever."""
    merged = {**similarity.find({}, {}, {}), "errors": []}  # the empty report: its settings, no rows
    for slug, files in sources.items():
        kata = katas[slug]
        args = {
            "files": {slug: files},
            "references": {slug: kata.reference.read_text()} if kata.reference.is_file() else {},
            "stubs": {slug: kata.stub.read_text()} if kata.stub.is_file() else {},
        }
        try:
            found = bounded.call("dojo.grading.scan.similarity:find", args, timeout=SIMILARITY_TIMEOUT_S)
        except bounded.BoundedError as exc:
            merged["errors"].append({"kata": slug, "error": f"the similarity check could not finish: {exc}"})
            continue
        for key, rows in found.items():
            if isinstance(rows, list) and isinstance(merged.get(key), list):
                merged[key] += rows
    for rows in merged.values():
        if isinstance(rows, list) and all(isinstance(r, dict) and "similarity" in r for r in rows):
            rows.sort(key=lambda row: -row["similarity"])
    return merged


def _shown(path: Path) -> str:
    """A path as text for the report and the terminal: bytes that are not UTF-8 shown as escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def flags(sub: dict) -> tuple[str, str]:
    """The summary's integrity and sandboxed cells for one submission."""
    found = sum(len(f) for f in sub["integrity"].values())
    integrity = f"{found} finding{'s' if found != 1 else ''}" if found else "-"
    sandboxed = "-" if sub["sandboxed"] is None else ("yes" if sub["sandboxed"] else "NO")
    return integrity, sandboxed


def findings(doc: dict) -> list[str]:
    """The lines under the summary table: each integrity finding, why a run was not sandboxed, and the
    near-identical pairs and copies of the reference (threshold in dojo.grading.scan.similarity)."""
    lines = []
    for sub in doc["submissions"]:
        lines += [f"error: {sub['path']}: {why}" for why in sub["errors"]]
        lines += [
            f"error: {sub['path']} {slug}: {r['message']}"
            for slug, r in sub["katas"].items()
            if r["status"] == "error"
        ]
        for slug, found in sub["integrity"].items():
            lines += [f"integrity: {sub['path']} {slug}: {f}" for f in found]
        for slug, r in sub["katas"].items():
            lines += [f"{sub['path']} {slug}: {n}" for n in r["notes"] if n.startswith("NOT sandboxed")]
        apart = sub.get("candidate_process_points", {})
        if apart.get("total"):
            lines.append(
                f"claims not verified: {sub['path']}: {apart['points']}/{apart['total']} points' worth of tests "
                f"only the candidate's process measured (timings, buffers, in-place gradients): not in the score"
            )
    similar = doc["similar"]
    share = (
        f"{similar['threshold']:.0%} of the shorter file's tokens in common runs of {similar['min_match']}+"
    )
    lines += [
        f"near-identical ({p['similarity']:.0%}, threshold {share}): {p['a']} and {p['b']}, {p['kata']}"
        for p in similar["pairs"]
    ]
    lines += [
        f"near-identical to the reference ({c['similarity']:.0%}): {c['submission']}, {c['kata']}"
        for c in similar["reference"]
    ]
    lines += [f"similarity, {e['kata']}: {e['error']}" for e in similar.get("errors", [])]
    return lines
