"""Reading a grading's outcomes from the plugin's signed records, never from pytest's text.

`read_results` gives (tests, error) and the records it read: a clean run has an `end` record whose
exit status is the process's and exactly one outcome per test collected; a forged or repeated
record, a missing outcome or a process that ended early is an error, never a pass, and
`why_stopped` names how it ended (time limit, signal, exit) and during which test. Running the child
is dojo.grading.child's; signing the records, dojo.grading.channel's.
"""

from __future__ import annotations

import signal

from dojo.grading import channel
from dojo.grading.child import OUTPUT_LIMIT
from dojo.grading.result import TestResult


def read_results(receiver: channel.Receiver, returncode, timed_out: bool, timeout: float, output: str):
    """(tests, error, records) from the plugin's signed records, read once (the caller reuses them;
    none when they were tampered with). A clean run has an `end` record whose exit status is the
    process's, and exactly one outcome for every test collected; anything else is an error: a forged
    or repeated record, a missing outcome, or a process that ended early."""
    try:
        records = receiver.records()
    except channel.ChannelError as exc:
        return [], f"the grading results were tampered with ({exc}): not graded", []
    return (*_outcomes(records, returncode, timed_out, timeout, output), records)


def _outcomes(records: list[dict], returncode, timed_out: bool, timeout: float, output: str):
    """(tests, error) from verified records (read_results' rules)."""
    collected = next((r["collected"] for r in records if "collected" in r), [])
    started = [r["start"] for r in records if "start" in r]
    rows: dict[str, dict] = {}
    for record in records:
        if "row" in record:
            if record["row"]["id"] in rows:
                return [], f"two outcomes arrived for '{record['row']['property']}': not graded"
            rows[record["row"]["id"]] = record["row"]
    end = next((r["end"] for r in records if "end" in r), None)
    ids = [t["id"] for t in collected]
    if end is not None and not timed_out and end["exitstatus"] == returncode:
        if set(rows) != set(ids):
            missing, extra = len(set(ids) - set(rows)), len(set(rows) - set(ids))
            return (
                [],
                f"the outcomes do not match the tests collected ({missing} missing, {extra} unknown): not graded",
            )
        if rows:
            failed = any(row["outcome"] == "failed" for row in rows.values())
            if failed != (returncode == 1):
                return [], (
                    f"pytest's exit status {returncode} disagrees with the outcomes reported "
                    f"({'some' if failed else 'no'} test failed): not graded"
                )
            return [TestResult(**rows[i]) for i in ids], None
        if returncode == 5:
            return [], "the suite selected no tests" + (
                " (it has no example tests)" if end.get("examples_only") else ""
            )
        errors = [r["error"] for r in records if "error" in r]
        why = "\n".join(_last_lines(e["message"], 8) for e in errors) or _last_lines(output)
        return [], f"the test suite could not run (pytest exit code {returncode}):\n{why}"
    current = next((t for t in reversed(started) if t not in rows), None)
    current_prop = next((t["property"] for t in collected if t["id"] == current), None)
    reason = why_stopped(returncode, timed_out, timeout, current_prop)
    if not collected:
        return [], f"{reason}; no test ran.\n{_last_lines(output)}".rstrip()
    tests = []
    for test in collected:
        if test["id"] in rows:
            tests.append(TestResult(**rows[test["id"]]))
        elif test["id"] == current:
            tests.append(TestResult(**test, outcome="failed", message=reason))
        else:
            tests.append(TestResult(**test, outcome="failed", message="not run: the grading run had stopped"))
    return tests, reason


def why_stopped(returncode, timed_out: bool, timeout: float, current: str | None) -> str:
    during = f" while testing '{current}'" if current else ""
    if timed_out:
        return (
            f"grading stopped after the {timeout:g} s time limit{during}: an infinite loop, or far too slow"
        )
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        why = {
            signal.SIGSEGV: "crashed with a segmentation fault",
            signal.SIGBUS: "crashed with a bus error",
            signal.SIGABRT: "aborted",
            signal.SIGKILL: "was killed (SIGKILL), most likely for using too much memory",
            signal.SIGXFSZ: f"wrote more than {OUTPUT_LIMIT // 2**20} MiB of output and was stopped",
        }.get(sig, f"was killed by {name}")
        return f"the test process {why}{during}"
    return (
        f"the test process exited with code {returncode} before it finished{during}: "
        "does your code call os._exit() or exit the process?"
    )


def _last_lines(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])
