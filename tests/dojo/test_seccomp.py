"""The judge's worker's socket filter (dojo.grading.confine.seccomp), put on a fresh interpreter.

Each property is read in a child process that installs the filter and reports what it could do: no
socket but AF_UNIX (TCP, UDP, netlink refused with EACCES, from a thread started before the filter
and from a process started after it, too), io_uring_setup refused, the inherited kind of connection
(a socketpair) still working, and /proc saying the filter holds.
"""

from __future__ import annotations

import json
import subprocess
import sys

from dojo import ROOT

PROBE = r"""
import ctypes, errno, json, os, socket, subprocess, sys, threading
from dojo.grading.confine import seccomp

def opens(family, kind=socket.SOCK_STREAM):
    try:
        socket.socket(family, kind).close()
        return "opened"
    except OSError as exc:
        return errno.errorcode[exc.errno]

go, seen = threading.Event(), {}
early = threading.Thread(target=lambda: (go.wait(), seen.update(thread=opens(socket.AF_INET))))
early.start()
report = {"install": seccomp.install()}
go.set(); early.join()
report["thread"] = seen["thread"]
report["inet"] = opens(socket.AF_INET)
report["inet6"] = opens(socket.AF_INET6)
report["udp"] = opens(socket.AF_INET, socket.SOCK_DGRAM)
report["netlink"] = opens(socket.AF_NETLINK, socket.SOCK_DGRAM)
report["unix"] = opens(socket.AF_UNIX)
a, b = socket.socketpair()
a.send(b"x")
report["socketpair"] = b.recv(1).decode()
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
report["io_uring"] = errno.errorcode.get(ctypes.get_errno()) if libc.syscall(425, 4, params) < 0 else "opened"
report["status"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0]
child = "import socket\ntry:\n    socket.socket(socket.AF_INET)\n    print('opened')\nexcept OSError as e:\n    print(e.errno)"
report["child"] = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip()
print(json.dumps(report))
"""


def test_the_filter_allows_only_unix_sockets():
    """After install(): TCP, TCP over IPv6, UDP and netlink sockets are refused (EACCES), in a thread that
    was running before the filter and in a process started after it; AF_UNIX sockets and socketpairs
    work; io_uring_setup is refused; /proc/self/status says Seccomp 2 (a filter)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["install"] == "", f"the filter was not installed: {got['install']}"
    for name in ("inet", "inet6", "udp", "netlink", "thread"):
        assert got[name] == "EACCES", f"a {name} socket after the filter: {got[name]}, not EACCES"
    assert got["child"] == "13", f"a process started after the filter opened a TCP socket: {got['child']}"
    assert got["unix"] == "opened" and got["socketpair"] == "x", f"unix sockets broke: {got}"
    assert got["io_uring"] == "EACCES", f"io_uring_setup after the filter: {got['io_uring']}"
    assert got["status"] == "2", f"/proc/self/status says Seccomp {got['status']}, not 2 (a filter)"
