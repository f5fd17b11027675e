"""glibc's malloc thresholds, set once per process when the first native loop is made.

A network server on any asyncio loop makes and frees ``bytes`` of a few hundred KiB per
message once messages are large: what ``recv`` returned, a stream reader's buffer, what
``read()`` hands out. glibc gives the top of its heap back to the kernel as soon as a few
hundred KiB of it are free, so the next message faults those pages in again. rsloop lets
blocks below 1 MiB come from the heap and keeps up to 2 MiB free at its top; on a 100 KiB
stream echo that doubled the round trips per second at an unchanged peak RSS
(``docs/performance.md``).

Left alone when ``RSLOOP_TUNE_MALLOC=0``, when the environment already sets glibc's malloc
tunables (``GLIBC_TUNABLES`` with ``glibc.malloc.``, or a ``MALLOC_*_`` variable), on the
``asyncio`` backend, where the C library is not glibc, and in the portable build (which
runs what macOS runs). :func:`rsloop.malloc_tuning`
says which.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from . import _backend

MMAP_THRESHOLD = 1 << 20
TRIM_THRESHOLD = 2 << 20

# glibc's own environment variables for the same settings (the user's choice wins).
_GLIBC_VARS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)
_OFF = ("0", "off", "false", "no")

_status: str | None = None


def _why_not() -> str | None:
    setting = os.environ.get("RSLOOP_TUNE_MALLOC", "").strip().lower()
    if setting in _OFF:
        return f"off: RSLOOP_TUNE_MALLOC={os.environ['RSLOOP_TUNE_MALLOC']}"
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return "off: GLIBC_TUNABLES sets glibc.malloc tunables"
    for name in _GLIBC_VARS:
        if name in os.environ:
            return f"off: {name} is set"
    return None


def apply(set_thresholds: Callable[[int, int], bool]) -> None:
    """Sets the thresholds through the native ``set_thresholds`` the first time it is
    called in this process (a forked child inherits them, and this state)."""
    global _status
    if _status is not None:
        return
    why = _why_not()
    if why is not None:
        _status = why
    elif set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD):
        _status = f"mmap_threshold={MMAP_THRESHOLD} trim_threshold={TRIM_THRESHOLD}"
    elif _backend.PORTABLE and sys.platform.startswith("linux"):
        _status = "off: the portable build runs what macOS runs, which has no glibc"
    else:
        _status = "off: the C library is not glibc"


def status() -> str:
    """What :func:`apply` did, or that no native loop was made yet."""
    return _status if _status is not None else "off: no native loop was made yet"
