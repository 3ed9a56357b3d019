"""`python -m benchmarks [--peers] [--quick] [--only NAME ...] [--threads N] [--update-docs]`.

Runs the row groups in order (bpe, grading, decode, int4, modes, startup, generate, speculative;
llama_cpp with --peers), prints each group's time as it ends, then the whole table; writes
benchmarks/results/*.json, and with --update-docs the table in docs/benchmarks.md. A group that
raises is reported and the others still run; the exit status is then 1. Missed goals do not change
the exit status: they are figures, not tests.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from benchmarks import groups, report
from benchmarks.harness import Row, fix_threads

PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"  # the table's home


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--peers", action="store_true", help="add the optional peers (llama.cpp, when installed)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and one repeat: a smoke run")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(groups.GROUPS),
        metavar="NAME",
        help=f"run only this group (repeatable): {', '.join(groups.GROUPS)}",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads for every engine (default: all cores)"
    )
    parser.add_argument("--update-docs", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    return args


def selected(args: argparse.Namespace) -> list[str]:
    if args.only:
        return [name for name in groups.GROUPS if name in args.only]
    return [name for name in groups.GROUPS if args.peers or name not in groups.PEER_ONLY]


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    threads = fix_threads(args.threads)
    command = "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv)
    facts = report.machine_facts(threads, command.strip())
    ctx = groups.Context(quick=args.quick, threads=threads)
    rows: list[Row] = []
    failed: list[str] = []
    timings: dict[str, float] = {}
    cpu: dict[str, float] = {}  # CPU seconds, children (the grading subprocesses) included
    start = time.perf_counter()
    for name in selected(args):
        began, cpu_began = time.perf_counter(), cpu_seconds()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        try:
            got = groups.GROUPS[name](ctx)
        except Exception as exc:  # noqa: BLE001 - one broken group must not hide the others' figures
            traceback.print_exc()
            failed.append(name)
            got = [Row(name, f"{name} benchmarks", None, "", note=f"error: {type(exc).__name__}: {exc}")]
        timings[name], cpu[name] = time.perf_counter() - began, cpu_seconds() - cpu_began
        rows += got
        print(f"[bench] {name}: {len(got)} rows in {timings[name]:.1f} s", file=sys.stderr, flush=True)
    total = time.perf_counter() - start
    if hasattr(os, "getloadavg"):  # the load can change during a run: both ends go in the report
        facts["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report.print_table(rows, title=f"decode-dojo benchmarks ({total / 60:.1f} min, {threads} threads)")
    path = report.write_json(
        rows, facts, extra={"seconds": total, "group_seconds": timings, "group_cpu_seconds": cpu}
    )
    print(f"machine: {report.machine_line(facts)}\nresults: {path}")
    if args.update_docs:
        report.update_page(PAGE, rows, facts, total)
        print("docs/benchmarks.md: table updated")
    if failed:
        print(f"groups that raised: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
