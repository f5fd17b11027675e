"""One measurement in a fresh interpreter: ``python bench/_child.py LOOP WORKLOAD N WARMUP_N``.

Creates the loop, runs the workload once at WARMUP_N (warm-up: imports, first-call
paths, allocator pools), then once at N, and prints one JSON line on stdout with the
ops, the seconds, and peak RSS. Exit code 3 means "this loop is not installed here",
4 "this loop lacks an API the workload needs" (NotImplementedError or AttributeError
from the loop; the JSON line then says ``{"unsupported": "..."}``).
Run by ``bench/run.py``; it is a script (not ``-m``) so that the current directory
is not put on sys.path and ``import rsloop`` finds the installed wheel, not the
source tree.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import sys
import time

import workloads
from burst import BURSTS
from run import OURS  # rsloop builds and switches: one list

NOT_INSTALLED = 3
UNSUPPORTED = 4
MISSING_API = (NotImplementedError, AttributeError)


def _proc_status_kib(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return -1


def _rss_kib_now() -> int:
    return _proc_status_kib("VmRSS")


def _peak_rss_kib() -> int:
    """Peak RSS of this process. On Linux, VmHWM (the high-water mark of this process's
    own memory map): getrusage(RUSAGE_SELF).ru_maxrss is not usable in a child, because
    Linux carries the parent's high-water mark over fork + exec, so every child would
    report at least the runner's own RSS. Elsewhere ru_maxrss."""
    hwm = _proc_status_kib("VmHWM")
    if hwm >= 0:
        return hwm
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r // 1024 if sys.platform == "darwin" else r  # bytes on macOS, KiB elsewhere


class CollectorClock:
    """CPU seconds and count of the garbage collector's passes while ``on`` (asked for with
    ``BENCH_GC_TIME=1``: a callback per collection costs every loop alike, a little)."""

    def __init__(self) -> None:
        self.on = False
        self.seconds = 0.0
        self.collections = 0
        self.full = 0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if not self.on:
            return
        if phase == "start":
            self._t0 = time.process_time()
            return
        self.seconds += time.process_time() - self._t0
        self.collections += 1
        self.full += info.get("generation") == 2


def make_loop(name: str):
    """(loop, info) for a loop name; raises ImportError when the loop is missing."""
    info: dict = {}
    if name == "asyncio":
        loop = asyncio.new_event_loop()
    elif name == "uvloop":
        import uvloop

        info["version"] = uvloop.__version__
        loop = uvloop.new_event_loop()
    elif name == "rloop":
        import rloop

        info["version"] = rloop.__version__
        loop = rloop.new_event_loop()
    elif name in OURS:
        import rsloop

        if name == "rsloop-poll" and os.environ.get("RSLOOP_BACKEND") != "poll":
            raise RuntimeError("rsloop-poll must run with RSLOOP_BACKEND=poll")
        loop = rsloop.new_event_loop()
        b = rsloop.backend(loop)
        info["version"] = rsloop.__version__
        info["backend"] = b.name
        info["backend_reason"] = b.reason
        if hasattr(rsloop, "malloc_tuning"):  # rsloop-base may predate it
            info["malloc"] = rsloop.malloc_tuning()
        info["file"] = rsloop.__file__
    elif name == "pypi-rsloop":
        loop, info = _pypi_rsloop()
    else:
        raise SystemExit(f"unknown loop {name!r}")
    info["type"] = f"{type(loop).__module__}.{type(loop).__qualname__}"
    return loop, info


def _installed_from(dist: str):
    """Where pip installed ``dist`` from (e.g. the wheel's path), if it says."""
    try:
        from importlib import metadata

        text = metadata.distribution(dist).read_text("direct_url.json")
        return json.loads(text).get("url") if text else None
    except Exception:
        return None


def _pypi_rsloop():
    """The older PyPI package also named ``rsloop`` (installed in its own venv)."""
    import rsloop

    if hasattr(rsloop, "backend"):
        raise ImportError(
            f"'rsloop' in {sys.executable} is this project's rsloop, not the PyPI one"
        )
    info = {"file": rsloop.__file__, "version": getattr(rsloop, "__version__", None)}
    build = getattr(rsloop, "build_info", None)
    if callable(build):
        try:
            b = build()
            info["backend"] = b.get("reactor")
            info["build_profile"] = b.get("profile")
        except Exception as exc:  # informational only
            info["build_info_error"] = repr(exc)
    return rsloop.new_event_loop(), info


def main() -> int:
    loop_name, wl_name, n, warm_n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    fn = {**workloads.WORKLOADS, **BURSTS}[wl_name][0]
    try:
        loop, info = make_loop(loop_name)
    except ImportError as exc:
        print(json.dumps({"skip": f"{type(exc).__name__}: {exc}"}))
        return NOT_INSTALLED
    asyncio.set_event_loop(loop)
    base_kib = _rss_kib_now()
    try:
        if warm_n:
            fn(loop, warm_n)
        gc.collect()
        collector = CollectorClock()
        if os.environ.get("BENCH_GC_TIME") == "1":
            gc.callbacks.append(collector)
            collector.on = True
        ops, (secs, cpu_secs) = fn(loop, n)
        collector.on = False
        if loop_name == "rsloop-nostats" and loop.stats().get("callbacks"):
            raise RuntimeError("rsloop-nostats: this wheel counts callbacks (stats on)")
    except MISSING_API as exc:
        why = f"{type(exc).__name__}: {str(exc) or 'raised by the loop'}"
        print(json.dumps({"unsupported": why, "info": info}))
        return UNSUPPORTED
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    peak_kib = _peak_rss_kib()
    # Only after measuring: importlib.metadata alone adds ~2-3 MiB of RSS.
    if loop_name in ("rsloop", "rsloop-poll", "rsloop-nostats", "rsloop-mimalloc", "pypi-rsloop"):
        # this project's wheels are the distribution rsloop-uring (named rsloop before
        # the rename); the older PyPI project's is rsloop
        dists = ["rsloop"] if loop_name == "pypi-rsloop" else ["rsloop-uring", "rsloop"]
        info["installed_from"] = next(filter(None, map(_installed_from, dists)), None)
    out = {
        "loop": loop_name,
        "workload": wl_name,
        "n": n,
        "ops": ops,
        "seconds": secs,
        "ops_per_s": ops / secs if secs > 0 else float("inf"),
        "cpu_seconds": cpu_secs,
        "ops_per_cpu_s": ops / cpu_secs if cpu_secs > 0 else float("inf"),
        "base_rss_kib": base_kib,
        "peak_rss_kib": peak_kib,
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "python": sys.version.split()[0],
        **(
            {
                "gc_seconds": collector.seconds,
                "gc_collections": collector.collections,
                "gc_full": collector.full,
            }
            if os.environ.get("BENCH_GC_TIME") == "1"
            else {}
        ),
        "executable": sys.executable,
        "info": info,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
