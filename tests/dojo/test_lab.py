"""`dojo lab`: JupyterLab on the workspace, localhost only, --allow-root exactly when root, the URL printed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

from dojo.notebook import lab


def test_allow_root_only_as_root(tmp_path):
    """The command passes --allow-root when running as root and never otherwise; it binds 127.0.0.1 with the
    port and token that the printed URL names"""
    as_root = lab.lab_command(tmp_path, 8123, "abc", as_root=True, browser=False)
    as_user = lab.lab_command(tmp_path, 8123, "abc", as_root=False, browser=True)
    assert "--allow-root" in as_root and "--allow-root" not in as_user
    assert "--no-browser" in as_root and "--no-browser" not in as_user
    for argv in (as_root, as_user):
        assert argv[:3] == [sys.executable, "-m", "jupyterlab"], argv
        assert {
            f"--ServerApp.root_dir={tmp_path}",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port=8123",
            "--ServerApp.port_retries=0",
            "--IdentityProvider.token=abc",
        } <= set(argv), argv


def test_dojo_lab_serves_the_workspace_at_the_printed_url(dojo):
    """`dojo lab` (as whoever runs the tests; as root here, which JupyterLab refuses without --allow-root)
    prints a URL at which JupyterLab answers, serving the workspace's notebooks"""
    assert dojo("notebook", "toy").returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "dojo", "lab", "--no-browser"],
        env=dojo.env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    seen = []
    try:
        url = None
        for line in proc.stdout:
            seen.append(line)
            if m := re.search(r"Open: (http://127\.0\.0\.1:\d+/lab\?token=\w+)", line):
                url = m.group(1)
                break
        assert url, f"no URL printed:\n{''.join(seen)}"
        base, token = url.split("/lab?token=")
        listing = None
        deadline = time.monotonic() + 120
        while listing is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=5) as reply:
                    listing = json.load(reply)
            except OSError:
                time.sleep(0.5)
        assert listing is not None, (
            f"JupyterLab did not answer at {url} (exit {proc.poll()}, root: "
            f"{os.geteuid() == 0}):\n{''.join(seen)}"
        )
        assert "toy.ipynb" in {item["name"] for item in listing["content"]}, listing
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        proc.stdout.close()


def test_kernel_problem_names_the_fix(monkeypatch):
    """A decode-dojo kernel that is missing, or runs another python, is reported with the command that
    installs it for this python; the one `make setup` installs is no problem"""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel

    assert lab.kernel_problem() is None, lab.kernel_problem()

    def missing(self, name):
        raise NoSuchKernel(name)

    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", missing)
    problem = lab.kernel_problem()
    assert problem and 'no Jupyter kernel "decode-dojo"' in problem, problem
    assert f"{sys.executable} -m ipykernel install --sys-prefix --name decode-dojo" in problem
    other = KernelSpec(
        argv=["/elsewhere/bin/python", "-m", "ipykernel_launcher"], display_name="x", language="python"
    )
    monkeypatch.setattr(KernelSpecManager, "get_kernel_spec", lambda self, name: other)
    problem = lab.kernel_problem()
    assert problem and "runs /elsewhere/bin/python, not this python" in problem, problem
