"""A seccomp filter the judge's worker puts on itself before the candidate's code runs: sockets of AF_UNIX only.

cgroup v1 charges a TCP or UDP socket's buffers to no memory group, so a submission could keep a
Tq x Tk matrix queued in loopback connections where the judge's peak charge (peak.py) never sees it
(a red team did: 1 GiB in about 105 TCP connections, charged 6.6 MiB). The worker needs only the
AF_UNIX connection it inherits, so `install` refuses (EACCES) socket() of any other family,
io_uring_setup (whose requests open sockets past this filter), and every syscall of another ABI
(32-bit or x32 entry points). A filter cannot be lifted: a process and all it starts keep it.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket

# machine -> (AUDIT_ARCH_*, __NR_seccomp, __NR_socket, __NR_io_uring_setup), from the kernel's uapi headers
ABIS = {
    "x86_64": (0xC000003E, 317, 41, 425),
    "aarch64": (0xC00000B7, 277, 198, 425),
}
X32_BIT = 0x40000000  # x86-64's x32 ABI: its syscall numbers carry this bit
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1  # TSYNC: every thread of the process, or none
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_ABS_W, JEQ_K, JGE_K, RET_K = (
    0x20,
    0x15,
    0x35,
    0x06,
)  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg 0's low 32 bits on a little-endian CPU)


class _Insn(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def program(arch: int, nr_socket: int, nr_io_uring_setup: int) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k): a jump skips jt (true) or jf (false) instructions."""
    deny = RET_ERRNO | errno.EACCES
    return [
        (LD_ABS_W, 0, 0, ARCH),
        (JEQ_K, 0, 7, arch),  # another ABI: denied
        (LD_ABS_W, 0, 0, NR),
        (JGE_K, 5, 0, X32_BIT),  # x32's numbers: denied
        (JEQ_K, 4, 0, nr_io_uring_setup),
        (JEQ_K, 0, 2, nr_socket),  # not socket(): allowed
        (LD_ABS_W, 0, 0, ARG0),
        (JEQ_K, 0, 1, socket.AF_UNIX),
        (RET_K, 0, 0, RET_ALLOW),
        (RET_K, 0, 0, deny),
    ]


def install() -> str:
    """Put the filter on this process (every thread) for good; "" when it holds, else why it could not."""
    machine = platform.machine()
    if machine not in ABIS:
        return f"no socket filter for {machine} (only {', '.join(ABIS)})"
    arch, nr_seccomp, nr_socket, nr_uring = ABIS[machine]
    insns = program(arch, nr_socket, nr_uring)
    table = (_Insn * len(insns))(*[_Insn(*i) for i in insns])
    prog = _Prog(len(insns), table)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"no_new_privs refused: {errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())}"
    done = libc.syscall(
        ctypes.c_long(nr_seccomp),
        ctypes.c_long(SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(prog),
    )
    if done != 0:
        code = ctypes.get_errno()
        return f"the kernel refused the socket filter ({errno.errorcode.get(code, code) if done < 0 else f'thread {done}'})"
    return ""
