"""`dojo lab [DIR]`: JupyterLab on your workspace (or DIR), reachable from this machine only, and its URL.

It runs this venv's JupyterLab bound to 127.0.0.1 on a free port with a token it makes, prints the URL,
then becomes JupyterLab (Ctrl-C stops it). It passes `--allow-root` when running as root, and only then,
and says when the "decode-dojo" kernel is missing or runs another python. No other JupyterLab options.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from pathlib import Path

from dojo.notebook.build import KERNELSPEC
from dojo.practice import report, workspace

HOST = "127.0.0.1"


def lab_command(root_dir: Path, port: int, token: str, *, as_root: bool, browser: bool) -> list[str]:
    """The command line that starts JupyterLab on `root_dir` at http://127.0.0.1:<port>/lab?token=<token>."""
    argv = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root_dir}",
        f"--ServerApp.ip={HOST}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
    ]
    if as_root:
        argv.append("--allow-root")
    if not browser:
        argv.append("--no-browser")
    return argv


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the system picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def kernel_problem() -> str | None:
    """What is wrong with the notebooks' kernel ("decode-dojo") for this python, or None."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    name = KERNELSPEC["name"]
    fix = (
        f"{sys.executable} -m ipykernel install --sys-prefix --name {name} "
        f'--display-name "{KERNELSPEC["display_name"]}"'
    )
    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        return (
            f'there is no Jupyter kernel "{name}", which the kata notebooks ask for: install it with\n  {fix}'
        )
    if Path(spec.argv[0]).parent != Path(sys.executable).parent:
        return (
            f'the kernel "{name}" runs {spec.argv[0]}, not this python ({sys.executable}), so notebooks would '
            f"be graded with another copy of dojo: re-register it with\n  {fix}"
        )
    return None


def cmd_lab(args) -> int:
    out = report.console()
    root_dir = Path(args.dir).expanduser().resolve() if args.dir else workspace.workspace_dir()
    if args.dir and not root_dir.is_dir():
        raise FileNotFoundError(f"no folder at {root_dir}")
    root_dir.mkdir(parents=True, exist_ok=True)
    port = args.port or free_port()
    token = secrets.token_hex(24)
    argv = lab_command(root_dir, port, token, as_root=running_as_root(), browser=not args.no_browser)
    if problem := kernel_problem():
        report.console(stderr=True).print(f"dojo: warning: {problem}", markup=False)
    out.print(f"JupyterLab on {root_dir}", markup=False)
    out.print(f"Open: http://{HOST}:{port}/lab?token={token}", markup=False)
    out.print("(Ctrl-C stops it)", markup=False)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)  # this process becomes JupyterLab


def register(subparsers) -> None:
    p = subparsers.add_parser("lab", help="start JupyterLab on your workspace and print its URL")
    p.add_argument("dir", nargs="?", help="the folder to open (default: your workspace)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.set_defaults(func=cmd_lab)
