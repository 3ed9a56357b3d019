"""Proof that the timing tests never fail correct work: roofline's, latency's and batching's, idle and loaded.

Runs those suites' machine tests (`pytest -m machine`) N times on a target with the machine idle and
loaded by LOAD `yes` processes (always killed), prints passed / failed / inconclusive per kata and
condition, and exits 1 on any failure. --hostile also grades the target beside a hostile submission
at `dojo grade --jobs 2` and checks that its grade is what it is alone.

    python -m benchmarks.prove_timing [--target solutions|DIR] [--runs 10] [--load 8] [--hostile]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from dojo import ROOT, targets

KATAS = ("roofline", "latency", "batching")
OUTCOMES = ("passed", "failed", "inconclusive")

# A take-home that is correct nowhere and hostile everywhere: CPU-bound threads that run outside any
# test, a /tmp filled with files, processes forked until the cap refuses. Its katas just fail.
HOSTILE = """
import os, threading

def _spin():
    while True:
        pass

for _ in range(4):
    threading.Thread(target=_spin, daemon=True).start()
try:
    for i in range(64):
        with open(f"/tmp/fill-{i}", "wb") as f:
            f.write(b"x" * (16 << 20))
except OSError:
    pass
try:
    for _ in range(1000):
        if os.fork() == 0:
            _spin()
except OSError:
    pass


def __getattr__(name):  # every function the suite asks for hangs, so the grading lasts its whole timeout
    def hang(*args, **kwargs):
        threading.Event().wait()
    return hang
"""


def machine_run(target: str, out: Path) -> Counter:
    """One pytest run of the three suites' machine tests: outcome counts keyed (kata, outcome)."""
    suites = [str(ROOT / "tests" / "katas" / f"test_{k}.py") for k in KATAS]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "machine",
            *suites,
            f"--target={target}",
            "-p",
            "no:cacheprovider",
            f"--dojo-results={out}",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=900,
    )
    rows = json.loads(out.read_text())["tests"] if out.exists() else []
    out.unlink(missing_ok=True)
    counts = Counter()
    for row in rows:
        kata = next(k for k in KATAS if f"test_{k}.py" in row["id"])
        counts[kata, row["outcome"] if row["outcome"] in OUTCOMES else "failed"] += 1
    if not rows:
        counts["(no results)", "failed"] += 1
    return counts


def loaded(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def hostile_neighbour(target: str, tmp: Path) -> list[str]:
    """Grade the target's katas alone, then beside the hostile submission at --jobs 2; the differences."""
    from dojo.interview import takehome

    honest = tmp / "honest"
    honest.mkdir()
    for kata in KATAS:
        shutil.copyfile(targets.resolve(kata, target), honest / f"{kata}.py")
    hostile = tmp / "hostile"
    hostile.mkdir()
    for kata in KATAS:
        (hostile / f"{kata}.py").write_text(HOSTILE)

    def verdicts(doc: dict) -> dict:
        sub = next(s for s in doc["submissions"] if s["path"] == str(honest.resolve()))
        return {(k, t["name"]): t["status"] for k, r in sub["katas"].items() for t in r["tests"]}

    alone = verdicts(takehome.grade_submissions([honest], jobs=1))
    beside = verdicts(takehome.grade_submissions([honest, hostile], jobs=2))
    print(f"hostile neighbour: {len(alone)} tests of {target} graded alone and beside it at --jobs 2")
    changed = [
        f"{k} {name}: alone {alone[k, name]}, beside the hostile one {beside.get((k, name))}"
        for k, name in alone
        if beside.get((k, name)) != alone[k, name]
    ]
    statuses = Counter(beside.values())
    print("  beside it: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target", default="solutions", help="solutions (default) or a folder of <kata>.py files"
    )
    parser.add_argument("--runs", type=int, default=10, help="runs per condition (default 10)")
    parser.add_argument(
        "--load", type=int, default=8, help="`yes` processes in the loaded condition (default 8)"
    )
    parser.add_argument(
        "--hostile", action="store_true", help="also grade beside a hostile submission (--jobs 2)"
    )
    args = parser.parse_args(argv)
    table: dict[str, Counter] = {}
    with tempfile.TemporaryDirectory(prefix="dojo-prove-timing-") as tmp_name:
        tmp = Path(tmp_name)
        for condition in ("idle", f"load {args.load}"):
            procs = loaded(args.load) if condition != "idle" else []
            try:
                table[condition] = Counter()
                for run in range(args.runs):
                    table[condition] += machine_run(args.target, tmp / "results.json")
                    print(f"{condition}: run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
            finally:
                stop(procs)
        print(f"\nmachine tests of {args.target}, {args.runs} runs per condition")
        print(f"{'kata':<12} {'condition':<10} " + " ".join(f"{o:>12}" for o in OUTCOMES))
        failed = 0
        for condition, counts in table.items():
            for kata in sorted({k for k, _ in counts}):
                print(f"{kata:<12} {condition:<10} " + " ".join(f"{counts[kata, o]:>12}" for o in OUTCOMES))
                failed += counts[kata, "failed"]
        sys.stdout.flush()  # the table stands even if the hostile run below goes wrong
        changed = hostile_neighbour(args.target, tmp) if args.hostile else []
    for line in changed:
        print(f"CHANGED {line}")
    return 1 if failed or changed else 0


if __name__ == "__main__":
    sys.exit(main())
