"""Take-home grading: `dojo grade PATH...` grades every kata file in each submission, sandboxed, into
one report, and says which submissions share their code (dojo.grading.similarity).

Each grading is dojo.grading.grade.grade with `sandboxed=True` (a note says where the machine cannot);
the report adds per submission the integrity findings (dojo.grading.integrity) and whether every kata ran
sandboxed, and across submissions the near-identical pairs and copies of the reference. Nothing is
recorded in the progress database: a grader's runs are not the grader's own practice.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dojo import catalog, source
from dojo.grading import grade, similarity


def grade_submissions(folders: list[Path], *, jobs: int = 2, timeout: float | None = None) -> dict:
    """Grade take-home submissions, sandboxed: every kata with a suite whose <slug>.py, or else
    <slug>.ipynb, is in each folder (a .ipynb instead of a folder: its kata, see dojo.notebook), `jobs`
    gradings at once. Returns the report: {"version", "graded", "submissions": [{"path", "katas":
    {slug: results.json document}, "points", "total", "passed", "sandboxed", "integrity": {slug:
    findings}}], "similar": dojo.grading.similarity.find's pairs and copies of the reference}. Records
    nothing in the progress DB."""
    katas = [k for k in catalog.load() if k.has_suite]
    submissions = [{"path": str(Path(f).resolve()), "katas": {}} for f in folders]
    work: list[tuple[int, str, Path, Path | None]] = []  # (submission, kata, target, notebook or None)
    for i, folder in enumerate(map(Path, folders)):
        if folder.suffix == ".ipynb":
            from dojo.notebook import grading as notebooks

            work.append((i, notebooks.kata_of(folder), folder, folder))
            continue
        for k in katas:
            if (folder / f"{k.slug}.py").is_file():
                work.append((i, k.slug, folder, None))
            elif (folder / f"{k.slug}.ipynb").is_file():
                work.append((i, k.slug, folder, folder / f"{k.slug}.ipynb"))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # each grading is a subprocess: threads suffice
        futures = [(i, slug, pool.submit(_grade_one, slug, folder, notebook, timeout)) for i, slug, folder, notebook in work]
        for i, slug, future in futures:
            submissions[i]["katas"][slug] = future.result().to_json()
    for sub in submissions:
        results = sub["katas"].values()
        sub["points"] = sum(r["points"] for r in results)
        sub["total"] = sum(r["total"] for r in results)
        sub["passed"] = bool(sub["katas"]) and all(r["status"] == "pass" for r in results)
        sub["inconclusive"] = sum(len(r["inconclusive"]) for r in results)
        sub["sandboxed"] = bool(sub["katas"]) and all(r["sandboxed"] for r in results)
        sub["integrity"] = {slug: r["integrity"] for slug, r in sub["katas"].items() if r["integrity"]}
    sources: dict[str, dict[str, str]] = {}
    for i, slug, folder, notebook in work:
        sources.setdefault(slug, {})[submissions[i]["path"]] = _source(folder, slug, notebook)
    kata_files = {k.slug: k for k in katas}
    similar = similarity.find(
        sources,
        {s: kata_files[s].reference.read_text() for s in sources if kata_files[s].reference.is_file()},
        {s: kata_files[s].stub.read_text() for s in sources if kata_files[s].stub.is_file()},
    )
    return {"version": 1, "graded": time.time(), "submissions": submissions, "similar": similar}


def _grade_one(slug: str, folder: Path, notebook: Path | None, timeout: float | None) -> grade.GradeResult:
    """One sandboxed grading: a .py by the engine, a notebook through the notebook layer (cells, not lines)."""
    if notebook is None:
        return grade.grade(slug, str(folder), timeout=timeout, sandboxed=True)
    from dojo.notebook import grading as notebooks

    return notebooks.grade_notebook(notebook, slug, timeout=timeout, sandboxed=True)


def _source(folder: Path, slug: str, notebook: Path | None) -> str:
    """The code graded for `slug`: the .py file, or a notebook's solution cells ("" if unreadable)."""
    from dojo.notebook import extract as nbextract

    try:
        if notebook is not None:
            return nbextract.extract(nbextract.read(notebook), notebook.name).source
        return source.read_python(folder / f"{slug}.py")[0]  # as Python decodes it (coding cookie)
    except (OSError, ValueError):  # source.Undecodable is a ValueError: the integrity scan reports it
        return ""


def flags(sub: dict) -> tuple[str, str]:
    """The summary's integrity and sandboxed cells for one submission."""
    found = sum(len(f) for f in sub["integrity"].values())
    integrity = f"{found} finding{'s' if found != 1 else ''}" if found else "-"
    sandboxed = "-" if not sub["katas"] else ("yes" if sub["sandboxed"] else "NO")
    return integrity, sandboxed


def findings(doc: dict) -> list[str]:
    """The lines under the summary table: each integrity finding, why a run was not sandboxed, and the
    near-identical pairs and copies of the reference (threshold in dojo.grading.similarity)."""
    lines = []
    for sub in doc["submissions"]:
        for slug, found in sub["integrity"].items():
            lines += [f"integrity: {sub['path']} {slug}: {f}" for f in found]
        for slug, r in sub["katas"].items():
            lines += [f"{sub['path']} {slug}: {n}" for n in r["notes"] if n.startswith("NOT sandboxed")]
    similar = doc["similar"]
    share = f"{similar['threshold']:.0%} of the shorter file's tokens in common runs of {similar['min_match']}+"
    lines += [f"near-identical ({p['similarity']:.0%}, threshold {share}): {p['a']} and {p['b']}, {p['kata']}"
              for p in similar["pairs"]]
    lines += [f"near-identical to the reference ({c['similarity']:.0%}): {c['submission']}, {c['kata']}"
              for c in similar["reference"]]
    return lines
