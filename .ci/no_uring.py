#!/usr/bin/env python3
"""Run a command with io_uring refused, as a container's default seccomp profile does.

    python .ci/no_uring.py CMD ARGS...

Installs a seccomp filter that makes io_uring_setup fail with EPERM (x86_64 and aarch64
share its number, 425), then execs CMD; the filter is inherited by every thread and child.
Nothing else on the machine is affected. Used to show that the test suites fail, loudly,
when the ring is refused and RSLOOP_EXPECT_NO_URING is not set.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

IO_URING_SETUP = 425
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
EPERM = 1


class Filter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]


def refuse_io_uring() -> None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
        raise SystemExit("no_uring.py: Linux x86_64/aarch64 only")
    libc = ctypes.CDLL(None, use_errno=True)
    insns = (Filter * 4)(
        Filter(0x20, 0, 0, 0),  # ld [seccomp_data.nr]
        Filter(0x15, 0, 1, IO_URING_SETUP),  # jeq io_uring_setup
        Filter(0x06, 0, 0, SECCOMP_RET_ERRNO | EPERM),  # ret ERRNO(EPERM)
        Filter(0x06, 0, 0, SECCOMP_RET_ALLOW),  # ret ALLOW
    )
    prog = Prog(len(insns), insns)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    refuse_io_uring()
    os.execvp(sys.argv[1], sys.argv[1:])
