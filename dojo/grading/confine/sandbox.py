"""The take-home sandbox: the grading child and the judge's worker run inside bubblewrap (`bwrap`).

`bwrap_args` builds its command line: new network and PID namespaces (every process dies with the
grading), a read-only view of only the system, the interpreter's packages (no checkout of this
project) and the grading folder, and a private /tmp of at most TMP_BYTES. `process_limit` and
`child_uid` give the process cap and the uid it binds. `unavailable()` says why a machine cannot
sandbox; grading then runs without it and the report says so. It cannot stop code inside the test
process from lying to pytest.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from dojo import ROOT

SWITCH = "DOJO_SANDBOX"  # "0": never sandbox (the report says so)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
PASSED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "NO_COLOR")  # plus every DOJO_*, OMP_*, MKL_*, TORCH_*
PASSED_PREFIXES = ("DOJO_", "OMP_", "MKL_", "OPENBLAS_", "TORCH_")
TMP_BYTES = 512 * 2**20  # the private /tmp is memory: a submission that fills it stops here


def process_limit() -> int:
    """How many processes and threads the submission's uid may hold: room for pytest, torch's thread
    pools (about two a core) and a few helpers; far below a fork loop. $DOJO_PROCESS_LIMIT overrides."""
    given = os.environ.get("DOJO_PROCESS_LIMIT")
    if given:
        if not given.isdigit() or int(given) < 8:
            raise ValueError(
                f"DOJO_PROCESS_LIMIT must be a whole number of processes, at least 8; got {given!r}"
            )
        return int(given)
    return 32 + 2 * len(os.sched_getaffinity(0))


def child_uid() -> int | None:
    """The uid the child drops to: None as a normal user (its own uid, in a user namespace); as root a
    fresh unused one, since RLIMIT_NPROC never binds uid 0 and two gradings must not share a count."""
    return None if os.geteuid() != 0 else 2**20 + secrets.randbelow(2**30)


def _is_checkout(path: Path) -> bool:
    """A checkout of this project, or a folder holding this one or the home folder (a .pth naming /work)."""
    holds = any(inside.is_relative_to(path) for inside in (ROOT.resolve(), Path.home().resolve()))
    return (
        holds
        or (path / "katas" / "katas.toml").is_file()
        or ((path / "solutions").is_dir() and (path / "dojo").is_dir())
    )


@cache
def python_paths() -> list[Path]:
    """The interpreter's folders to show: its prefixes and the package folders on the sys.path that a
    fresh interpreter builds (`python -I`: not this process's, which pytest or PYTHONPATH may have
    extended), without a checkout of this project (the editable install's root) and without
    anything inside another."""
    fresh = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; print('\\n'.join(sys.path))"],
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
    ).stdout
    found = [Path(sys.base_prefix), Path(sys.prefix), Path(os.path.realpath(sys.executable)).parent]
    found += [Path(p) for p in fresh.splitlines() if p and Path(p).exists()]
    keep: list[Path] = []
    for path in sorted({p.resolve() for p in found}, key=lambda p: len(p.parts)):
        if _is_checkout(path) or any(path.is_relative_to(k) for k in keep):
            continue
        keep.append(path)
    return keep


def _ancestors(paths: list[Path], covered: list[Path]) -> list[Path]:
    """Folders to create (mode 0755) before binding `paths`: bwrap makes missing parents 0700, which a
    dropped uid cannot enter. "/" and the private /tmp exist already."""
    out = set()
    for path in paths:
        for parent in path.parents:
            if parent not in (Path("/"), Path("/tmp")) and not any(parent.is_relative_to(c) for c in covered):
                out.add(parent)
    return sorted(out, key=lambda p: len(p.parts))


def bwrap_args(grading: Path, *, uid: int | None) -> list[str]:
    """bwrap's command line up to the command: namespaces, the view, the private /tmp."""
    args = [
        "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if uid is None:
        args.append("--unshare-user")
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    args += [x for name in ETC if Path(name).exists() for x in ("--ro-bind", name, name)]
    args += [
        "--ro-bind",
        "/sys",
        "/sys",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(TMP_BYTES),
        "--tmpfs",
        "/tmp",
    ]
    binds = [*python_paths(), grading]
    covered = [Path(n) for n in SYSTEM if Path(n).exists()] + [Path("/sys"), Path("/proc"), Path("/dev")]
    for folder in _ancestors(binds, covered):
        args += ["--perms", "0755", "--dir", str(folder)]
    for path in binds:
        args += ["--ro-bind", str(path), str(path)]
        for masked in ("solutions", "tests"):  # a non-editable install would hold the references here
            if path != grading and (path / masked).is_dir():
                args += ["--tmpfs", str(path / masked)]
    args += ["--chdir", "/tmp"]
    return args


def environment(base: dict[str, str]) -> dict[str, str]:
    """The child's environment: `base` (the grader's own settings) plus the locale and thread settings
    of this one, nothing else (no HOME, no paths into the repository)."""
    passed = {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith(PASSED_PREFIXES)}
    path = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
    return {**passed, "PATH": path, "HOME": "/tmp", "TMPDIR": "/tmp", **base}


@cache
def unavailable() -> str | None:
    """Why this machine cannot sandbox a grading (None: it can). Tried once per process: bwrap runs
    this interpreter in the view of an empty folder."""
    if os.environ.get(SWITCH, "1") == "0":
        return f"{SWITCH}=0 is set"
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed: `make setup` installs it where it can (apt, as root)"
    probe = Path(tempfile.mkdtemp(prefix="dojo-sandbox-probe-"))
    uid = child_uid()
    cmd = bwrap_args(probe, uid=uid) + [sys.executable, "-c", "import sys"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not start: {exc}"
    finally:
        probe.rmdir()
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"bwrap does not work here ({why}): are user namespaces off?"
    return None


def exit_status(returncode: int) -> int:
    """bwrap reports a child killed by signal N as 128 + N; the grader's convention is -N."""
    return -(returncode - 128) if 128 < returncode < 128 + 65 else returncode
