"""`make tour`: the newcomer's walk through the practice loop and a mock interview, on the real CLI.

`python -m dojo.tools.tour [--kata kv_cache]` types what a newcomer types, in a detached tmux session and a
fresh workspace: `dojo`, start, a failing check, hint, the reference, a passing check; the scheduler with a
one-line TPOT bug (every failure and the hint point at TPOT); an interview and its submit; a second one
answered with nonsense and marked "all" ("self-assessed, not found in the answer"); `dojo history`. Each
step checks what a person should see and the exit status: one PASS or FAIL line a step, exit 1 on any
failure. Slow, so not part of `make test`; the steps: docs/design/dojo.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dojo import ROOT, catalog, targets

BEGIN = "TOUR-BEGIN"  # printed by the shell before a step's command, with the step's number (never typed)
EXIT = re.compile(r"^TOUR-EXIT:(\d+)\s*$", re.M)  # printed after it, with its exit status
PAGERS = {"less", "more", "most", "pager"}
WIDTH, HEIGHT = 200, 50
ANSWER = (
    "Per token the cache holds 2 (keys and values) x layers x KV heads x head_dim x bytes per element; "
    "grouped-query attention divides it by the group size."
)
NONSENSE = "banana banana the GPU is purple, 42 requests because giraffes."  # the self-marking leg's answer


@dataclass
class Step:
    title: str
    command: str  # typed at the shell prompt
    expect: tuple[str, ...] = ()  # regular expressions that must match the screen (whitespace-insensitive)
    absent: tuple[str, ...] = ()  # ... and that must not
    status: int | None = 0  # the exit status wanted (None: any)
    answers: tuple[
        tuple[str, str], ...
    ] = ()  # (a prompt on screen, the line typed at it, each time it waits)
    timeout: float = 300.0


# ---- reading the screen (pure) -----------------------------------------------------------------


def step_text(capture: str, number: int) -> str:
    """What step `number` printed: the capture after its BEGIN line, up to its exit line (excluded);
    '' before it began."""
    mark = f"{BEGIN} {number}\n"
    start = capture.find(mark)
    if start < 0:
        return ""
    text = EXIT.split(capture[start + len(mark) :], maxsplit=1)[0]
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def exit_status(capture: str, number: int) -> int | None:
    """The exit status of step `number` once its exit line is on screen; None before that."""
    start = capture.find(f"{BEGIN} {number}\n")
    found = EXIT.search(capture[start:]) if start >= 0 else None
    return int(found.group(1)) if found else None


def _flat(text: str) -> str:
    return " ".join(text.split())


def missing(screen: str, patterns: tuple[str, ...]) -> list[str]:
    """The patterns (regular expressions) found nowhere on `screen`, read with all whitespace as one space
    (a line wrapped by the terminal still matches)."""
    flat = _flat(screen)
    return [p for p in patterns if not re.search(p, flat)]


def present(screen: str, patterns: tuple[str, ...]) -> list[str]:
    """The patterns that `screen` shows (for what must not be there)."""
    flat = _flat(screen)
    return [p for p in patterns if re.search(p, flat)]


def waiting_at(screen: str, prompt: str, answered: int) -> bool:
    """Whether `screen` ends at `prompt` asked once more than the `answered` times already answered."""
    lines = [line for line in screen.splitlines() if line.strip()]
    return bool(lines) and prompt in lines[-1] and screen.count(prompt) > answered


# ---- the terminal ------------------------------------------------------------------------------


class Terminal:
    """A detached tmux session (on its own server socket) running an interactive bash."""

    def __init__(self, env: dict[str, str], rcfile: Path, cwd: Path):
        self.socket = f"dojo-tour-{os.getpid()}"
        self.name = "tour"
        self.env, self.rcfile, self.cwd = env, rcfile, cwd
        self.path = ""  # the server's socket file, once open

    def tmux(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=self.env
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def open(self) -> None:
        shell = f"bash --noprofile --rcfile {shlex.quote(str(self.rcfile))} -i"
        self.tmux(
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            self.name,
            "-x",
            str(WIDTH),
            "-y",
            str(HEIGHT),
            "-c",
            str(self.cwd),
            shell,
        )
        self.tmux("set-option", "-g", "history-limit", "50000")
        self.path = self.tmux("display-message", "-p", "#{socket_path}").strip()

    def close(self) -> None:
        """Kill the tour's tmux server, and remove its socket file (tmux leaves it)."""
        self.tmux("kill-server", check=False)
        if self.path:
            Path(self.path).unlink(missing_ok=True)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)
        self.tmux("send-keys", "-t", self.name, "Enter")

    def key(self, key: str) -> None:
        self.tmux("send-keys", "-t", self.name, key)

    def capture(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", self.name)

    def clear_history(self) -> None:
        self.tmux("clear-history", "-t", self.name)

    def pager_open(self) -> bool:
        """Whether a pager runs under the pane's shell (read from /proc; Linux)."""
        pid = int(self.tmux("display-message", "-p", "-t", self.name, "#{pane_pid}").strip())
        return any(name in PAGERS for name in _descendants(pid))


def _descendants(pid: int) -> list[str]:
    """The command names of every process below `pid`."""
    children: dict[int, list[tuple[int, str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append((int(stat.parent.name), name))
    names, todo = [], [pid]
    while todo:
        for child, name in children.get(todo.pop(), []):
            names.append(name)
            todo.append(child)
    return names


def run_step(term: Terminal, step: Step, number: int) -> tuple[str, int | None, float]:
    """Type the step's command, answer its prompts and quit its pager until it exits (or times out):
    (the screen it left, its exit status or None on a timeout, the seconds it took)."""
    term.clear_history()
    term.type(f"step {step.command}")
    answered = {prompt: 0 for prompt, _ in step.answers}
    began = time.monotonic()
    while time.monotonic() - began < step.timeout:
        time.sleep(0.5)
        capture = term.capture()
        status = exit_status(capture, number)
        if status is not None:
            return step_text(capture, number), status, time.monotonic() - began
        screen = step_text(capture, number)
        if term.pager_open():
            term.key("q")
            continue
        for prompt, line in step.answers:
            if waiting_at(screen, prompt, answered[prompt]):
                term.type(line)
                answered[prompt] += 1
    return step_text(term.capture(), number), None, time.monotonic() - began


# ---- the tour ----------------------------------------------------------------------------------


def steps(slug: str, workspace: Path) -> list[Step]:
    path = re.escape(str(workspace / f"{slug}.py"))
    solution = shlex.quote(str(targets.solutions_dir() / f"{slug}.py"))
    copy = f'cp {solution} "$DOJO_WORKSPACE/{slug}.py"'
    nonsense = shlex.quote(str(workspace.parent / "nonsense.sh"))  # written by _setup
    return [
        Step(
            "the welcome screen",
            "dojo",
            expect=(r"Progress: 0 of \d+ passing", r"Suggested next: \w+", r"dojo start"),
        ),
        Step(f"start {slug}", f"dojo start {slug}", expect=(f"Edit {path}", f"Then: dojo check {slug}")),
        Step(
            "check the untouched stub: it fails, one line naming what is not written yet",
            f"dojo check {slug}",
            status=1,
            expect=(
                r"todo +0/\d+ pt +not written yet: \w",
                r"tests? waits? on",
                r"Score 0/\d+ points",
                r"Keep going",
            ),
            absent=(r"\bFAIL\b",),  # no failure line per test when they all wait on unwritten code
        ),
        Step(
            "ask for a hint",
            f"dojo hint {slug}",
            expect=(r"Hint \d+ of \d+, chosen for your first failing property '", r"--next` goes in order"),
        ),
        Step("write a passing solution (the reference, for the tour)", copy),
        Step(
            "check again: it passes",
            f"dojo check {slug}",
            expect=(r"\bpass\b", r"Score (\d+)/\1 points . (\d+)/\2 tests passing", r"All tests pass"),
            absent=(r"\bFAIL\b",),
        ),
        *scheduler_leg(),
        Step(
            "start a mock interview",
            f"dojo interview {slug}",
            expect=(
                f"Mock interview: {slug}",
                r"The interview starts from the stub",
                r"backed up at",
                r"Rules: edit",
                r"Time left: \d+:\d\d",
            ),
        ),
        Step("solve it again (the interview starts from the stub)", copy),
        Step(
            "submit, answer the follow-ups, mark the rubric",
            "dojo submit",
            answers=(("Which points did you cover?", "1"),),
            expect=(
                r"Score (\d+)/\1 points",
                r"Question 1 of \d+",
                r"Your answer\.",
                r"Model answer\.",
                f"Scorecard: {slug}",
                r"Tests passed: (\d+)/\1",
                r"Rubric coverage: \d+/\d+",
                r"Verdict: \w",
            ),
            absent=(r"\bFAIL\b", r"blank answer", r"Stopped before question"),
        ),
        # the self-marking leg: every follow-up answered with nonsense and marked "all"; a mark the answer
        # shows no sign of earns nothing, and the scorecard says which ones
        Step("a second mock interview", f"dojo interview {slug}", expect=(f"Mock interview: {slug}",)),
        Step("solve it again", copy),
        Step(
            "answer with nonsense, mark every point: the scorecard says the marks are not in the answers",
            f'eval "EDITOR={nonsense} dojo submit"',  # $EDITOR for this command only
            answers=(("Which points did you cover?", "all"),),
            expect=(
                f"Scorecard: {slug}",
                r"Rubric coverage: \d+/\d+ \(\d+ marked point\(s\) self-assessed, not found in the answer: "
                r"no credit\)",
                r"Q1\.1 .* self-assessed, not found in the answer \(no credit\)",
            ),
            absent=(r"Rubric coverage: (\d+)/\1\b", r"Stopped before question"),  # full marks; cut short
        ),
        Step(
            "the interview history",
            "dojo history",
            expect=(
                r"# +when +kata",
                rf"\b1 +\d{{4}}-\d\d-\d\d \d\d:\d\d +{slug} +(\d+)/\1",
                r"dojo history N",
            ),
        ),
    ]


TPOT_RIGHT, TPOT_BUG = "(last - first) / (n - 1) if n > 1", "(last - first) / n if n > 1"  # the bug, one line
TPOT = "TPOT is the time from the first token to the last"  # the scheduler suite's TPOT property
# a FAIL entry (up to the next entry or the score) that is not the TPOT test and does not point at it
ELSEWHERE = (
    rf"\bFAIL \d+/\d+ pt (?!{TPOT})(?:(?!probably because '{TPOT})(?!\b(?:pass|FAIL) \d+/\d+ pt )(?!Score \d).)*"
    r"(?=\b(?:pass|FAIL) \d+/\d+ pt |Score \d)"
)


def scheduler_leg() -> list[Step]:
    """The scheduler with the TPOT bug of its mutant tpot_divides_by_n planted in the learner's copy: the
    check's first failure is the TPOT test, every later one says it probably comes from it, and the
    hint chosen for it is about TPOT, not blocks."""
    solution = shlex.quote(str(targets.solutions_dir() / "scheduler.py"))
    plant = (
        f'cp {solution} "$DOJO_WORKSPACE/scheduler.py" && '
        f"sed -i 's|{TPOT_RIGHT}|{TPOT_BUG}|' \"$DOJO_WORKSPACE/scheduler.py\" && "
        f'grep -F {shlex.quote(TPOT_BUG)} "$DOJO_WORKSPACE/scheduler.py"'
    )
    return [
        Step("start the scheduler", "dojo start scheduler", expect=("Then: dojo check scheduler",)),
        Step("the reference with a one-line TPOT bug: divides by n, not n - 1", f"eval {shlex.quote(plant)}"),
        Step(
            "check it: the TPOT test fails first, every other failure points at it",
            "dojo check scheduler",
            status=1,
            expect=(rf"FAIL \d+/\d+ pt {TPOT}", rf"probably because '{TPOT}", r"Keep going"),
            absent=(ELSEWHERE,),
        ),
        Step(
            "the hint is about TPOT, not blocks",
            "dojo hint scheduler",
            expect=(
                rf"chosen for your first failing property '{TPOT}",
                r"TPOT is \W*\(stamps\[-1\] - stamps\[0\]\) / \(n - 1\)",
            ),
            absent=(r"\broom\b",),
        ),
    ]


def _setup(folder: Path, workspace: Path) -> tuple[dict[str, str], Path]:
    editor = folder / "editor.sh"  # the learner's $EDITOR: writes an answer below the question and quits
    editor.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(ANSWER)} >> \"$1\"\n")
    editor.chmod(0o755)
    nonsense = folder / "nonsense.sh"  # the self-marking leg's $EDITOR: an answer that covers nothing
    nonsense.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(NONSENSE)} >> \"$1\"\n")
    nonsense.chmod(0o755)
    rc = folder / "bashrc"
    rc.write_text(
        "PS1='$ '\nunset PROMPT_COMMAND\nHISTFILE=/dev/null\n"
        f'dojo() {{ {shlex.quote(sys.executable)} -m dojo "$@"; }}\n'
        f'TOUR_STEP=0\nstep() {{ TOUR_STEP=$((TOUR_STEP + 1)); printf \'{BEGIN} %d\\n\' "$TOUR_STEP"; "$@"; '
        "printf 'TOUR-EXIT:%d\\n' \"$?\"; }\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "VISUAL", "NO_COLOR")}
    env.update(
        DOJO_WORKSPACE=str(workspace),
        EDITOR=str(editor),
        HOME=env.get("HOME", str(folder)),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")])),
    )
    return env, rc


def tour(slug: str, keep: bool = False) -> int:
    if shutil.which("tmux") is None:
        print("the tour needs tmux: apt-get install tmux (or your system's package)")
        return 2
    catalog.get(slug)  # an unknown kata stops here, naming the known ones
    folder = Path(tempfile.mkdtemp(prefix="dojo-tour-"))
    workspace = folder / "workspace"
    workspace.mkdir()
    env, rc = _setup(folder, workspace)
    term = Terminal(env, rc, ROOT)
    failed = ran = 0
    plan = steps(slug, workspace)
    try:
        term.open()
        for number, step in enumerate(plan, start=1):
            screen, status, took = run_step(term, step, number)
            ran = number
            problems = [f"not on screen: {p}" for p in missing(screen, step.expect)]
            problems += [f"on screen but should not be: {p}" for p in present(screen, step.absent)]
            if status is None:
                problems.append(f"still running after {step.timeout:.0f} s")
            elif step.status is not None and status != step.status:
                problems.append(f"exit status {status}, wanted {step.status}")
            print(f"\n{'=' * 30} step {number}/{len(plan)}: {step.title} {'=' * 30}")
            print(f"$ {step.command}")
            print(screen)
            verdict = "FAIL" if problems else "PASS"
            print(f"--- {verdict}  step {number}: {step.title}  (exit {status}, {took:.1f} s)")
            for p in problems:
                print(f"      {p}")
            failed += bool(problems)
            if status is None:
                print("      stopping: the terminal is stuck on this step")
                break
    finally:
        term.close()
        if keep:
            print(f"\nThe tour's workspace is kept at {workspace}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(
        f"\ntour: {ran - failed}/{len(plan)} steps passed"
        + (f", {failed} failed" if failed else "")
        + (f", {len(plan) - ran} not run" if ran < len(plan) else "")
    )
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dojo.tools.tour", description=__doc__.splitlines()[0])
    p.add_argument("--kata", default="kv_cache", help="the kata to tour (default: kv_cache, quick to grade)")
    p.add_argument("--keep", action="store_true", help="keep the temporary workspace afterwards")
    args = p.parse_args(argv)
    return tour(args.kata, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
