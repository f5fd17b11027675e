"""glibc's malloc thresholds (rsloop/_malloc.py): set when the first native loop is made,
left alone when the user says so or already chose, and never by the asyncio backend.

Each case runs in a fresh interpreter (the settings are process-wide). What a case checks
is glibc's behaviour, read back with ``mallinfo2()``: a 600 KiB block comes from ``mmap``
under glibc's defaults and from the heap once the mmap threshold is 1 MiB."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from rsloop import _backend


def _has_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


pytestmark = [
    pytest.mark.skipif(_backend.NATIVE_ERROR is not None, reason="native module missing"),
    pytest.mark.skipif(
        sys.platform != "linux" or platform.libc_ver()[0] != "glibc" or not _has_mallinfo2(),
        reason="glibc with mallinfo2 (2.33+) only",
    ),
]

PROBE = """
import ctypes, json, sys
import rsloop

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

before_loop = rsloop.malloc_tuning()
loop = rsloop.new_event_loop()
mapped = libc.mallinfo2().hblkhd
block = libc.malloc(600 * 1024)
mapped = libc.mallinfo2().hblkhd - mapped
libc.free(block)
print(json.dumps({
    "before_loop": before_loop,
    "status": rsloop.malloc_tuning(),
    "backend": rsloop.backend(loop).name,
    "mmapped": mapped > 0,
}))
loop.close()
"""

_OURS = ("RSLOOP_BACKEND", "RSLOOP_TUNE_MALLOC", "GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_")


def probe(**env: str) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in _OURS}
    full.update(env)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE)],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("backend", ["auto", "poll"])
def test_a_native_loop_sets_the_thresholds(backend):
    r = probe(RSLOOP_BACKEND=backend)
    assert r["before_loop"] == "off: no native loop was made yet"
    assert r["backend"] != "asyncio"
    if _backend.PORTABLE:
        # What macOS runs: no glibc, nothing set, glibc's own defaults stay.
        assert r["status"] == "off: the portable build runs what macOS runs, which has no glibc"
        assert r["mmapped"], "glibc's default mmap threshold (128 KiB) should still apply"
        return
    assert r["status"] == "mmap_threshold=1048576 trim_threshold=2097152"
    assert not r["mmapped"], "a 600 KiB block should come from the heap"


def test_rsloop_tune_malloc_0_leaves_glibc_alone():
    r = probe(RSLOOP_TUNE_MALLOC="0")
    assert r["status"] == "off: RSLOOP_TUNE_MALLOC=0"
    assert r["mmapped"], "glibc's default mmap threshold (128 KiB) should still apply"


@pytest.mark.parametrize(
    "env",
    [
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"},
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
    ],
    ids=["GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_"],
)
def test_the_users_own_malloc_settings_win(env):
    r = probe(**env)
    assert r["status"].startswith("off: "), r
    assert next(iter(env)) in r["status"]
    assert r["mmapped"], "the user's settings, not ours, should apply"


def test_the_asyncio_backend_changes_nothing():
    r = probe(RSLOOP_BACKEND="asyncio")
    assert r["backend"] == "asyncio"
    assert r["status"] == "off: no native loop was made yet"
    assert r["mmapped"]
